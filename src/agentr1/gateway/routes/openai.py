"""OpenAI-compatible routes, mounted at /v1 and at /sessions/{session_id}/v1: HTTP in, HTTP out; the call
itself is :class:`~agentr1.gateway.model_call.ModelCall`, the formats are :mod:`agentr1.gateway.codecs`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentr1.gateway.calls import Gateway
from agentr1.gateway.codecs.chat import chat_input, encode_chat, stream_chat
from agentr1.gateway.codecs.chat_body import CHAT_BODY_OPENAPI, read_chat_body
from agentr1.gateway.codecs.common import respond
from agentr1.gateway.codecs.completions import completion_input, encode_completion, stream_completion
from agentr1.gateway.errors import APIError
from agentr1.gateway.limits import BoundedRoute
from agentr1.gateway.model_call import ModelCall
from agentr1.gateway.routes import anthropic, responses
from agentr1.gateway.schemas import CompletionRequest

router = APIRouter(route_class=BoundedRoute)


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


def _model(gw: Gateway, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "agentr1"}


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    gw = _gateway(request)
    return {"object": "list", "data": [_model(gw, n) for n in gw.served_models()]}


@router.get("/models/{model:path}")
async def get_model(model: str, request: Request) -> dict[str, Any]:
    gw = _gateway(request)
    if model not in gw.served_models():
        raise APIError(404, f"The model `{model}` does not exist; this gateway serves `{gw.backend.model_name}`",
                       code="model_not_found", param="model")
    return _model(gw, model)


@router.post("/chat/completions", openapi_extra=CHAT_BODY_OPENAPI)
async def chat_completions(request: Request) -> Response:
    body, messages = await read_chat_body(request)  # parsed and validated here: the history's prefix only once
    call = await ModelCall.attribute(request, chat_input(_gateway(request), body, messages))
    return await respond(request, call, encode_chat, stream_chat if body.stream else None)


@router.post("/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    call = await ModelCall.attribute(request, completion_input(_gateway(request), body))
    return await respond(request, call, encode_completion, stream_completion if body.stream else None)


# The other wire formats agents speak, at the same prefixes (/v1 and /sessions/{session_id}/v1).
router.include_router(responses.router)
router.include_router(anthropic.router)
