"""The model APIs, mounted at /v1 and at /sessions/{session_id}/v1: OpenAI's (models, chat completions, completions,
Responses) and Anthropic's Messages. HTTP in, HTTP out: the call itself is
:class:`~agentr1.gateway.model_call.ModelCall`, the formats (errors in each API's own shape included) are
:mod:`agentr1.gateway.codecs`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentr1.gateway.auth import require_session_access
from agentr1.gateway.codecs import anthropic, chat, responses
from agentr1.gateway.codecs import completions as text_completion
from agentr1.gateway.codecs.chat_body import CHAT_BODY_OPENAPI, read_chat_body
from agentr1.gateway.errors import APIError
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.limits import BoundedRoute
from agentr1.gateway.model_call import ModelCall
from agentr1.gateway.schemas import CompletionRequest, CountTokensRequest, MessagesRequest, ResponsesRequest

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
    # the body is read here (not by FastAPI): parsed and validated, the history's prefix only once per session
    return await ModelCall.answer(request, chat, await read_chat_body(request))


@router.post("/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    return await ModelCall.answer(request, text_completion, body)


# -- OpenAI Responses (``POST /responses``, ``GET /responses/{id}``) -----------------------------------------------

@router.post("/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    return await ModelCall.answer(request, responses, body)


@router.get("/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> dict[str, Any]:
    session_id, _, response = responses.response_log(_gateway(request)).get(response_id, param="response_id")
    await require_session_access(request, session_id)
    return response


# -- Anthropic Messages (``POST /messages``, ``POST /messages/count_tokens``) --------------------------------------

@router.post("/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    return await ModelCall.answer(request, anthropic, body)


@router.post("/messages/count_tokens")
async def count_message_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
    return anthropic.count_tokens(_gateway(request), body)
