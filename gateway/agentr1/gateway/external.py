"""Calls answered by an external model (LiteLLM backend: teacher, judge, baseline).

There are no token ids to capture: the messages go to the provider as they are, and the step
records the text answer with empty id arrays, ``trainable=False`` (the trainer skips such steps;
SFT can render them for the policy's template later)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse

from agentr1.gateway.calls import Gateway, persist, sampling_from
from agentr1.gateway.sessions import SessionState
from agentr1.store import StepRecord


async def external_chat(gw: Gateway, state: SessionState, body: Any) -> Any:
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    tools = None if body.tool_choice == "none" else body.tools
    max_tokens = body.max_completion_tokens or body.max_tokens
    sampling = sampling_from(body, gw.settings, max_tokens, 0)
    started = time.monotonic()
    results = await gw.backend.generate_chat(messages, sampling=sampling, tools=tools,  # type: ignore[attr-defined]
                                             tool_choice=body.tool_choice, n=body.n)
    latency_ms = (time.monotonic() - started) * 1000
    indices = list(range(state.next_index, state.next_index + len(results)))
    state.next_index += len(results)
    steps = [StepRecord(
        session_id=state.id, index=index, observation_ids=[], action_ids=[], action_logprobs=None,
        messages_sent=messages, messages_seen=messages, tools=tools, sampling={"temperature": sampling.temperature,
                                                                               "max_new_tokens": sampling.max_new_tokens},
        action={"content": r.message.get("content"), "tool_calls": r.message.get("tool_calls"),
                "reasoning": r.message.get("reasoning_content"), "message": r.message, "provider_logprobs": r.logprobs},
        finish_reason=r.finish_reason, backend=gw.backend.name, model=r.model, trainable=False, latency_ms=latency_ms,
    ) for index, r in zip(indices, results, strict=True)]
    state.previous = []  # nothing to continue token for token
    gw.metrics.observe_call(latency_ms, results[0].prompt_tokens if results else 0,
                            sum(r.completion_tokens for r in results))
    await persist(gw, steps)
    prompt = results[0].prompt_tokens if results else 0
    completion = sum(r.completion_tokens for r in results)
    payload = {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": results[0].model if results else gw.backend.model_name, "system_fingerprint": None,
        "choices": [{"index": i, "message": {**r.message, "refusal": None}, "finish_reason": r.finish_reason,
                     "logprobs": None} for i, r in enumerate(results)],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        "agentr1": {"session_id": state.id, "steps": indices, "trainable": False},
    }
    if body.stream:
        return StreamingResponse(_as_chunks(payload), media_type="text/event-stream")
    return JSONResponse(payload, headers={"X-Agentr1-Session": state.id, "X-Agentr1-Steps": ",".join(map(str, indices))})


async def _as_chunks(payload: dict[str, Any]) -> AsyncIterator[bytes]:
    """The whole answer as chat.completion.chunk events (the provider was asked without streaming)."""
    head = {k: payload[k] for k in ("id", "created", "model", "system_fingerprint")}
    for choice in payload["choices"]:
        message = choice["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": k, **tc} for k, tc in enumerate(message["tool_calls"])]
        for part in (delta, {}):
            reason = choice["finish_reason"] if not part else None
            chunk = {**head, "object": "chat.completion.chunk",
                     "choices": [{"index": choice["index"], "delta": part, "logprobs": None, "finish_reason": reason}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"
