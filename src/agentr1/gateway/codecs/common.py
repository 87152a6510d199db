"""What the wire formats share: sampling parameters from a body, JSON as the responses write it, and the SSE
framing."""

from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi.responses import JSONResponse

from agentr1.core.generation import SamplingParams
from agentr1.gateway.errors import APIError
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import has_non_finite

__all__ = ["FastJSONResponse", "check_logit_bias_ids", "dump_json", "sampling_params", "sse"]


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
    """The sampling parameters of a body. Without ``max_tokens`` (and no ``max_tokens_default``) ``max_new_tokens``
    is 0: up to the context limit, which :func:`~agentr1.gateway.model_call.check_context` turns into the room the
    prompt leaves (an external model gets no limit: its provider's default)."""
    return SamplingParams(
        max_new_tokens=max_tokens or settings.max_tokens_default or 0,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        top_k=max(0, top_k or 0),
        stop=[stop] if isinstance(stop, str) else list(stop or []),
        stop_token_ids=list(stop_token_ids or []),
        seed=seed,
        top_logprobs=top_logprobs,
    )


def check_logit_bias_ids(renderer: Any, bias: dict[str, Any] | None) -> None:
    """A 400 for a ``logit_bias`` key past the tokenizer's vocabulary, as OpenAI answers it (the entries' count, keys
    and values are checked with the body). An external model (no renderer) leaves its provider to check."""
    if not bias or renderer is None:
        return
    vocab = len(renderer.tokenizer)
    largest = max(int(key) for key in bias)
    if largest >= vocab:
        raise APIError(400, f"Invalid key in 'logit_bias': {largest}. Maximum value is {vocab - 1}.",
                       code="invalid_request", param="logit_bias")
