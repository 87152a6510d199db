"""Session lifecycle: create, reward, finish, fetch the trace."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import Field

from agentr1.gateway.auth import require_session_access, session_run
from agentr1.gateway.branches import branch_report
from agentr1.gateway.context import ContextPolicyError, build_policy
from agentr1.gateway.errors import APIError, error_body
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.limits import BoundedRoute
from agentr1.gateway.sampling_override import METADATA_KEY as SAMPLING_KEY
from agentr1.gateway.sampling_override import sampling_override
from agentr1.gateway.schemas import (
    MAX_SESSIONS_PER_REQUEST,
    RewardCreate,
    SessionCreate,
    SessionEnding,
    SessionFinish,
)
from agentr1.store import (
    NewSession,
    RewardRecord,
    SessionEnd,
    SessionNotRunning,
    StoreError,
    UnknownSession,
    UnknownStep,
    session_with_images,
)

router = APIRouter(prefix="/sessions", tags=["sessions"], route_class=BoundedRoute)


def _gw(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


SessionList = Annotated[list[SessionCreate], Field(max_length=MAX_SESSIONS_PER_REQUEST)]


@router.post("", status_code=201)
async def create_session(body: SessionCreate | SessionList, request: Request) -> Any:
    """Open a session, or a list of them in one transaction (all or none): the answer, or the list of answers."""
    gw = _gw(request)
    asked = body if isinstance(body, list) else [body]
    new = [NewSession(run_id=session_run(request, b.run_id), task_id=b.task_id, group_id=b.group_id,
                      metadata=_with_context(b, f"[{i}]." if isinstance(body, list) else ""),
                      session_id=b.session_id, policy_version=gw.backend.policy_version)
           for i, b in enumerate(asked)]
    created = await gw.sessions.create_many(new)
    base_url = gw.settings.base_url(str(request.base_url))
    answers = []
    for (state, key), session in zip(created, new, strict=True):
        context = (session.metadata or {}).get("context")
        if gw.context is not None:
            gw.context.remember(state.id, context)
        answers.append({"id": state.id, "run_id": state.run_id, "task_id": session.task_id,
                        "group_id": session.group_id, "base_url": f"{base_url}/sessions/{state.id}/v1", "api_key": key,
                        "policy_version": session.policy_version, "context": context})
    return answers if isinstance(body, list) else answers[0]


def _with_context(body: SessionCreate, where: str) -> dict[str, Any]:
    """The session's metadata with its context policy (``context``, or ``metadata["context"]``) checked and in
    full, and its sampling override (``metadata["sampling"]``) checked: a bad one is a 400 before any session
    exists, not a broken session. ``where``: the item's place in a list (``[3].``), empty for one session."""
    metadata = dict(body.metadata)
    context = body.context if body.context is not None else metadata.get("context")
    if context is not None:
        try:
            metadata["context"] = build_policy(context).config
        except ContextPolicyError as exc:
            raise APIError(400, str(exc), code="invalid_request", param=f"{where}context") from exc
    try:
        override = sampling_override(metadata)
    except APIError as exc:
        raise APIError(exc.status, exc.message, code=exc.code, param=f"{where}{exc.param}") from exc
    if override is not None:
        metadata[SAMPLING_KEY] = override.model_dump(exclude_none=True)
    return metadata


@router.post("/finish")
async def finish_sessions(body: Annotated[list[SessionEnding], Field(max_length=MAX_SESSIONS_PER_REQUEST)],
                          request: Request) -> dict[str, Any]:
    """End a list of sessions in one transaction: ``{"results": [...]}``, one for each in order, ``{"id", "status"}``
    when it ended, else ``{"id", "error", "status_code"}``: what the single finish route would have answered (no access,
    unknown session, ``session_finished`` when it had ended already); the others end all the same."""
    gw = _gw(request)
    results: list[dict[str, Any]] = [{"id": ending.id} for ending in body]
    ends = []
    for result, ending in zip(results, body, strict=True):
        try:
            await require_session_access(request, ending.id, also=ending.api_key)
            state = await gw.sessions.get(ending.id)
        except APIError as exc:
            result.update(error_body(exc.status, exc.message, exc.code), status_code=exc.status)
            continue
        ends.append((result, state, SessionEnd(ending.id, ending.status, ending.reward, ending.error)))
    await gw.writer.flush()  # the steps these sessions' calls answered are stored before the sessions end
    failures = await gw.sessions.finish_many([(state, end) for _, state, end in ends])
    for (result, _, end), failure in zip(ends, failures, strict=True):
        if failure is None:
            result["status"] = end.status
        else:
            error = _ending_error(failure)
            result.update(error_body(error.status, error.message, error.code), status_code=error.status)
    return {"results": results}


def _ending_error(failure: StoreError) -> APIError:
    """What a session that could not end answers: 409 ``session_finished`` if it had ended, else 404."""
    if isinstance(failure, SessionNotRunning):
        return APIError(409, str(failure), code="session_finished")
    return APIError(404, str(failure), code="session_not_found")


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
        raise _ending_error(exc) from exc
    return {"id": session_id, "status": body.status}
