"""What the wire formats share: running a :class:`ModelCall` to an HTTP response (whole or as server-sent
events), sampling parameters from a body, and the SSE framing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentr1.gateway.backends.base import SamplingParams
from agentr1.gateway.errors import APIError
from agentr1.gateway.model_call import CallOutcome, ModelCall, TextDelta
from agentr1.gateway.settings import GatewaySettings
from agentr1.gateway.tracing import step_span
from agentr1.store import has_non_finite

__all__ = ["CallStream", "call_headers", "dump_json", "end_call", "respond", "sampling_params", "sse"]

Encoder = Callable[[ModelCall, CallOutcome], dict[str, Any]]
StreamEncoder = Callable[[ModelCall, AsyncIterator[TextDelta | CallOutcome]], AsyncIterator[bytes]]


def dump_json(payload: Any) -> bytes:
    """Compact JSON, non-ASCII kept, as ``json.dumps(separators=(",", ":"), ensure_ascii=False)`` writes it, in
    C (orjson). orjson writes NaN/inf as null where json refuses them: such values fail here as in json."""
    try:
        data = orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    if b"null" in data:  # a null may have been a NaN or an infinity: check (rare, cheap)
        if has_non_finite(payload):
            raise ValueError("Out of range float values are not JSON compliant")
    return data


class FastJSONResponse(JSONResponse):
    """starlette's JSONResponse rendered by :func:`dump_json` (same bytes, a fraction of the CPU)."""

    def render(self, content: Any) -> bytes:
        return dump_json(content)


def sse(payload: dict[str, Any] | str, event: str | None = None) -> bytes:
    data = payload.encode() if isinstance(payload, str) else dump_json(payload)
    return (f"event: {event}\ndata: ".encode() if event else b"data: ") + data + b"\n\n"


def sampling_params(settings: GatewaySettings, *, max_tokens: int | None, temperature: float | None = None,
                    top_p: float | None = None, top_k: int | None = None, stop: str | list[str] | None = None,
                    stop_token_ids: list[int] | None = None, seed: int | None = None,
                    top_logprobs: int = 0) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=max_tokens or settings.max_tokens_default,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        top_k=max(0, top_k or 0),
        stop=[stop] if isinstance(stop, str) else list(stop or []),
        stop_token_ids=list(stop_token_ids or []),
        seed=seed,
        top_logprobs=top_logprobs,
    )


def call_headers(call: ModelCall, steps: list[int] | None = None) -> dict[str, str]:
    headers = {"X-Agentr1-Session": call.state.id}
    if steps is not None:
        headers["X-Agentr1-Steps"] = ",".join(map(str, steps))
    return headers


class CallStream(StreamingResponse):
    """A streamed answer that releases its call however the stream ends (done, failed, client gone, or never
    started because the client left first)."""

    def __init__(self, content: AsyncIterator[bytes], call: ModelCall) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={**call_headers(call), "Cache-Control": "no-cache"})
        self.call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await end_call(self.call)


async def end_call(call: ModelCall) -> bool:
    """The call is over: release it, and discard its session if the call created it and no call of it stored a
    step (:meth:`~agentr1.gateway.sessions.SessionRegistry.discard_unused`); whether it did."""
    call.release()
    return await call.gw.sessions.discard_unused(call.state)


async def respond(request: Request, call: ModelCall, encode: Encoder, stream: StreamEncoder | None) -> Response:
    """Prepare and run ``call``; answer with ``encode(call, outcome)`` as JSON, or stream ``stream``'s events. A
    refused call leaves no session behind that it created; an error answer names the session when it remains."""
    try:
        with step_span(request.headers, call.state.id) as span:
            await call.prepare()
            if stream is not None:
                response: Response = CallStream(stream(call, call.events()), call)
                return response
            outcome = await call.run()
            if span is not None:
                span.set_attribute("agentr1.steps", ",".join(map(str, outcome.steps)))
    except BaseException as exc:
        if not await end_call(call) and isinstance(exc, APIError):
            exc.headers = {**call_headers(call), **(exc.headers or {})}
        raise
    await end_call(call)
    return FastJSONResponse(encode(call, outcome), headers=call_headers(call, outcome.steps))
