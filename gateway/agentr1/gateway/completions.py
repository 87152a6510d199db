"""Legacy /v1/completions: a prompt as text or token ids, one step per prompt and sample."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse

from agentr1.gateway.backends.base import GenerateRequest, GenerateResult, SamplingParams
from agentr1.gateway.calls import persist
from agentr1.gateway.errors import APIError
from agentr1.gateway.sessions import SessionState
from agentr1.store import StepRecord


def _prompts(gw: Any, prompt: Any) -> list[list[int]]:
    vocab = len(gw.renderer.tokenizer)
    if isinstance(prompt, str):
        prompt = [prompt]
    if prompt and isinstance(prompt[0], int):
        prompt = [prompt]
    out = []
    for p in prompt:
        ids = gw.renderer.tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else list(p)
        if not ids:
            raise APIError(400, "prompt must not be empty", code="invalid_prompt", param="prompt")
        if any(not 0 <= t < vocab for t in ids):
            raise APIError(400, f"prompt token ids must be in [0, {vocab})", code="invalid_prompt", param="prompt")
        out.append(ids)
    if len(out) > 64:
        raise APIError(400, "at most 64 prompts per request", param="prompt")
    return out


async def complete_text(gw: Any, state: SessionState, body: Any, sampling: SamplingParams,
                        check_context: Callable[..., None]) -> Any:
    prompts = _prompts(gw, body.prompt)
    for ids in prompts:
        check_context(gw, len(ids), sampling, explicit=body.max_tokens is not None)
    started = time.monotonic()
    jobs = []
    for ids in prompts:
        for i in range(body.n):
            s = SamplingParams(**asdict(sampling))
            if s.seed is not None:
                s.seed += i
            jobs.append((ids, GenerateRequest(prompt_ids=ids, sampling=s, session_id=state.id)))
    results: list[GenerateResult] = await asyncio.gather(*(gw.backend.generate(req) for _, req in jobs))
    tok = gw.renderer.tokenizer
    texts = []
    for result in results:
        text = tok.decode(result.output_ids, skip_special_tokens=True)
        if isinstance(result.matched_stop, str) and result.matched_stop in text:
            text = text[: text.rfind(result.matched_stop)]
        texts.append(text)
    latency_ms = (time.monotonic() - started) * 1000
    indices = list(range(state.next_index, state.next_index + len(results)))
    state.next_index += len(results)
    steps = []
    for index, (ids, _), result, text in zip(indices, jobs, results, texts, strict=True):
        step = StepRecord(
            session_id=state.id, index=index, observation_ids=ids, action_ids=result.output_ids,
            action_logprobs=result.logprobs, sampling={**asdict(sampling), "endpoint": "completions"},
            action={"content": text, "tool_calls": None, "reasoning": None},
            finish_reason=result.finish_reason, policy_version=result.policy_version, backend=gw.backend.name,
            model=gw.backend.model_name, trainable=gw.backend.trainable, latency_ms=latency_ms,
        )
        steps.append(step)
    gw.metrics.observe_call(latency_ms, sum(len(p) for p, _ in jobs), sum(len(r.output_ids) for r in results))
    await persist(gw, steps)
    choices = []
    for i, ((ids, _), result, text) in enumerate(zip(jobs, results, texts, strict=True)):
        lp = None
        if body.logprobs is not None:
            tokens = [tok.decode([t], skip_special_tokens=False) for t in result.output_ids]
            lp = {"tokens": tokens, "token_logprobs": result.logprobs, "top_logprobs": None,
                  "text_offset": [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]}
        prefix = tok.decode(ids, skip_special_tokens=False) if body.echo else ""
        choices.append({"index": i, "text": prefix + text, "logprobs": lp,
                        "finish_reason": "length" if result.finish_reason == "length" else "stop"})
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(r.output_ids) for r in results)
    payload = {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
        "model": gw.backend.model_name, "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "agentr1": {"session_id": state.id, "steps": indices},
    }
    if body.stream:
        return StreamingResponse(_as_events(payload), media_type="text/event-stream")
    return JSONResponse(payload)


async def _as_events(payload: dict[str, Any]) -> AsyncIterator[bytes]:
    """Completions are sampled whole, then sent as one event per choice in the streaming shape."""
    for choice in payload["choices"]:
        chunk = {k: v for k, v in payload.items() if k not in ("choices", "usage")}
        yield f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n".encode()
    yield b"data: [DONE]\n\n"
