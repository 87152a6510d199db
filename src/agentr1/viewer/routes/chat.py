"""The chat page's API: sessions and turns through the configured gateway (each call a recorded step)."""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Request

from agentr1.gateway import APIError
from agentr1.viewer.chat import TOOLS, ChatError, GatewayChat
from agentr1.viewer.schemas import ChatSessionCreate, ChatSessionOut, ChatTurnIn, ChatTurnOut
from agentr1.viewer.state import ViewerState, bad_request, viewer

router = APIRouter(prefix="/chat", tags=["chat"])


def _chat(state: ViewerState, **kwargs: object) -> GatewayChat:
    if not state.settings.gateway_url:
        raise APIError(409, "no gateway configured: start the viewer with --gateway URL", code="no_gateway")
    return GatewayChat(state.settings.gateway_url, client=state.http, run_id=state.settings.chat_run,
                       model=kwargs.pop("model", None) or state.settings.model, **kwargs)  # type: ignore[arg-type]


@router.get("/tools", response_model=list[str])
def list_tools() -> list[str]:
    return sorted(TOOLS)


@router.post("/sessions", response_model=ChatSessionOut, status_code=201)
def create_session(body: ChatSessionCreate, request: Request) -> ChatSessionOut:
    state = viewer(request)
    chat = _chat(state)
    chat.run_id = body.run_id or state.settings.chat_run
    try:
        session_id = chat.new_session()
    except (ChatError, httpx.HTTPError) as exc:
        raise APIError(502, f"the gateway refused a new session: {exc}", code="gateway_error") from exc
    return ChatSessionOut(id=session_id, api_key=chat.api_key, link=f"/sessions/{session_id}")


@router.post("/turn", response_model=ChatTurnOut)
def turn(body: ChatTurnIn, request: Request) -> ChatTurnOut:
    """Send the conversation so far; returns the assistant replies and tool results it added."""
    unknown = [t for t in body.tools if t not in TOOLS]
    if unknown:
        raise bad_request(f"unknown tools {unknown}; available: {sorted(TOOLS)}", "tools")
    chat = _chat(viewer(request), model=body.model, tools=body.tools, max_tokens=body.max_tokens,
                 temperature=body.temperature)
    try:
        added, steps = chat.turn(body.session_id, body.messages, body.api_key)
    except (ChatError, httpx.HTTPError) as exc:
        raise APIError(502, str(exc), code="gateway_error") from exc
    return ChatTurnOut(session_id=body.session_id, messages=added, steps=steps)
