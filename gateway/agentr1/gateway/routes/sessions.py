"""Session lifecycle: create, reward, finish, fetch the trace."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from agentr1.gateway.auth import require_session_access, session_run
from agentr1.gateway.branches import branch_report
from agentr1.gateway.calls import Gateway
from agentr1.gateway.context import ContextPolicyError, build_policy
from agentr1.gateway.errors import APIError
from agentr1.gateway.schemas import RewardCreate, SessionCreate, SessionFinish
from agentr1.store import RewardRecord, SessionNotRunning, UnknownSession, UnknownStep, session_with_images

router = APIRouter(prefix="/sessions", tags=["sessions"])


def _gw(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


@router.post("", status_code=201)
async def create_session(body: SessionCreate, request: Request) -> dict[str, Any]:
    run_id = session_run(request, body.run_id)
    gw = _gw(request)
    metadata = dict(body.metadata)
    context = body.context if body.context is not None else metadata.get("context")
    if context is not None:  # validated before the session exists: a bad policy is a 400, not a broken session
        try:
            metadata["context"] = build_policy(context).config
        except ContextPolicyError as exc:
            raise APIError(400, str(exc), code="invalid_request", param="context") from exc
    state, key = await gw.sessions.create(run_id=run_id, task_id=body.task_id, group_id=body.group_id,
                                          metadata=metadata, session_id=body.session_id,
                                          policy_version=gw.backend.policy_version)
    if gw.context is not None:
        gw.context.remember(state.id, metadata.get("context"))
    return {"id": state.id, "run_id": state.run_id, "task_id": body.task_id, "group_id": body.group_id,
            "base_url": f"{gw.settings.base_url(str(request.base_url))}/sessions/{state.id}/v1", "api_key": key,
            "policy_version": gw.backend.policy_version, "context": metadata.get("context")}


@router.get("/{session_id}")
async def get_session(session_id: str, request: Request) -> dict[str, Any]:
    await require_session_access(request, session_id)
    gw = _gw(request)
    await gw.writer.flush()
    try:
        record = await asyncio.to_thread(gw.sessions.store.get_session, session_id)
    except UnknownSession as exc:
        raise APIError(404, str(exc), code="session_not_found") from exc
    # images come back as the agent sent them (the store keeps them once, by hash)
    trace = await asyncio.to_thread(session_with_images, record, gw.sessions.store.images)
    return {**trace, **branch_report(record.steps)}  # and its shape: branches, drift, superseded steps


@router.post("/{session_id}/rewards", status_code=201)
async def add_reward(session_id: str, body: RewardCreate | list[RewardCreate], request: Request) -> dict[str, Any]:
    await require_session_access(request, session_id)
    gw = _gw(request)
    rewards = body if isinstance(body, list) else [body]
    await gw.writer.flush()  # a reward for a step the gateway just answered must find it
    records = [RewardRecord(session_id=session_id, value=r.value, name=r.name, step_index=r.step, source=r.source)
               for r in rewards]
    try:  # one transaction: a list is stored whole or not at all
        await asyncio.to_thread(gw.sessions.store.add_rewards, records)
    except UnknownSession as exc:
        raise APIError(404, str(exc), code="session_not_found") from exc
    except UnknownStep as exc:
        raise APIError(404, str(exc), code="step_not_found", param="step") from exc
    return {"session_id": session_id, "added": len(rewards)}


@router.post("/{session_id}/finish")
async def finish_session(session_id: str, body: SessionFinish, request: Request) -> dict[str, Any]:
    await require_session_access(request, session_id)
    gw = _gw(request)
    state = await gw.sessions.get(session_id)
    await gw.writer.flush()
    try:
        await gw.sessions.finish(state, body.status, reward=body.reward, error=body.error)
    except SessionNotRunning as exc:
        raise APIError(409, str(exc), code="session_finished") from exc
    return {"id": session_id, "status": body.status}
