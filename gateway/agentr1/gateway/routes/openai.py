"""OpenAI-compatible routes, mounted at /v1 and at /sessions/{session_id}/v1."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentr1.gateway.auth import authorize_call
from agentr1.gateway.calls import (
    Gateway,
    assistant_message,
    check_context,
    client_retry_count,
    finish_reason,
    generate_requests,
    prepare_chat,
    record,
    sampling_from,
)
from agentr1.gateway.completions import complete_text
from agentr1.gateway.external import external_chat
from agentr1.gateway.schemas import ChatCompletionRequest, CompletionRequest
from agentr1.gateway.streaming import stream_chat
from agentr1.gateway.tracing import step_span

router = APIRouter()


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway  # type: ignore[no-any-return]


def _headers(session_id: str, indices: list[int]) -> dict[str, str]:
    return {"X-Agentr1-Session": session_id, "X-Agentr1-Steps": ",".join(map(str, indices))}


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    gw = _gateway(request)
    names = [gw.backend.model_name, *gw.settings.model_aliases]
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "agentr1"} for n in names]}


@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    gw = _gateway(request)
    await authorize_call(request, request.path_params.get("session_id"))
    gw.check_model(body.model)
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    state = await gw.sessions.resolve(request, request.path_params.get("session_id"), messages)
    with step_span(request.headers, state.id) as span:
        if gw.backend.trainable:
            response = await _chat(gw, state, body, client_retry_count(request.headers))
        else:  # an external model: text in, text out, recorded but not trainable
            response = await external_chat(gw, state, body)
        if span is not None:
            span.set_attribute("agentr1.steps", response.headers.get("x-agentr1-steps", ""))
        return response


async def _chat(gw: Gateway, state: Any, body: ChatCompletionRequest, retry_count: int | None) -> Any:
    call = await prepare_chat(gw, state, body, retry_count=retry_count)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(stream_chat(gw, call, include_usage), media_type="text/event-stream",
                                 headers={"X-Agentr1-Session": state.id, "Cache-Control": "no-cache"})
    state.in_flight += 1
    try:
        results = await asyncio.gather(*(gw.backend.generate(r) for r in generate_requests(call)))
    finally:
        state.in_flight -= 1
    out = [assistant_message(gw, call, r, i) for i, r in enumerate(results)]
    reasons = [finish_reason(r, m) for r, m in zip(results, out, strict=True)]
    indices = await record(gw, call, results, out, reasons)
    completion_tokens = sum(len(r.output_ids) for r in results)
    choices = []
    for i, (result, message, reason) in enumerate(zip(results, out, reasons, strict=True)):
        choices.append({"index": i, "message": {**message, "refusal": None}, "finish_reason": reason,
                        "logprobs": _logprobs(gw, result) if body.logprobs else None})
    payload = {
        "id": call.request_id, "object": "chat.completion", "created": call.created, "model": call.model,
        "system_fingerprint": None, "choices": choices,
        "usage": {"prompt_tokens": len(call.plan.prompt_ids), "completion_tokens": completion_tokens,
                  "total_tokens": len(call.plan.prompt_ids) + completion_tokens},
        "agentr1": {"session_id": state.id, "steps": indices, "drift": call.plan.drift},
    }
    return JSONResponse(payload, headers=_headers(state.id, indices))


def _logprobs(gw: Gateway, result: Any) -> dict[str, Any]:
    tok = gw.renderer.tokenizer
    content = []
    for i, (token_id, logprob) in enumerate(zip(result.output_ids, result.logprobs, strict=True)):
        text = tok.decode([token_id], skip_special_tokens=False)
        alts = (result.top_logprobs[i] if result.top_logprobs else []) or []
        content.append({
            "token": text, "logprob": logprob, "bytes": list(text.encode()),
            "top_logprobs": [{"token": (t := tok.decode([a.token_id], skip_special_tokens=False)),
                              "logprob": a.logprob, "bytes": list(t.encode())} for a in alts],
        })
    return {"content": content, "refusal": None}


@router.post("/completions")
async def completions(body: CompletionRequest, request: Request) -> Any:
    gw = _gateway(request)
    await authorize_call(request, request.path_params.get("session_id"))
    gw.check_model(body.model)
    state = await gw.sessions.resolve(request, request.path_params.get("session_id"), None)
    sampling = sampling_from(body, gw.settings, body.max_tokens, body.logprobs or 0)
    return await complete_text(gw, state, body, sampling, check_context)
