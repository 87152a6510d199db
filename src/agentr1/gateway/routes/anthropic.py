"""Anthropic Messages routes (``POST /messages``, ``POST /messages/count_tokens``), included in the OpenAI
router, so they serve at /v1 and at /sessions/{session_id}/v1; errors in Anthropic's shape."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentr1.gateway.codecs import anthropic
from agentr1.gateway.limits import BoundedRoute
from agentr1.gateway.model_call import ModelCall
from agentr1.gateway.schemas import CountTokensRequest, MessagesRequest

router = APIRouter(route_class=BoundedRoute)


@router.post("/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    return await ModelCall.answer(request, anthropic, body)


@router.post("/messages/count_tokens")
async def count_message_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
    return anthropic.count_tokens(request.app.state.gateway, body)
