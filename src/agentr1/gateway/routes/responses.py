"""OpenAI Responses routes (``POST /responses``, ``GET /responses/{id}``), included in the OpenAI router, so
they serve at /v1 and at /sessions/{session_id}/v1."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentr1.gateway.auth import require_session_access
from agentr1.gateway.codecs import responses
from agentr1.gateway.limits import BoundedRoute
from agentr1.gateway.model_call import ModelCall
from agentr1.gateway.schemas import ResponsesRequest

router = APIRouter(route_class=BoundedRoute)


@router.post("/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    return await ModelCall.answer(request, responses, body)


@router.get("/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> dict[str, Any]:
    session_id, _, response = responses.response_log(request.app.state.gateway).get(response_id, param="response_id")
    await require_session_access(request, session_id)
    return response
