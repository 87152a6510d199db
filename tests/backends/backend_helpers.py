"""Helpers of the backend tests: requests, running a backend in one event loop, collecting a stream,
serving a fake server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def request(prompt: list[int], rid: str = "", **sampling: Any) -> GenerateRequest:
    sampling.setdefault("max_new_tokens", 8)
    sampling.setdefault("temperature", 0.0)
    return GenerateRequest(prompt_ids=list(prompt), sampling=SamplingParams(**sampling), request_id=rid)


async def using(backend: Any, body: Callable[[Any], Coroutine[Any, Any, Any]]) -> Any:
    """Start ``backend``, run ``body(backend)``, close it: one event loop for the whole use."""
    await backend.start()
    try:
        return await body(backend)
    finally:
        await backend.close()


async def collect(stream: Any) -> tuple[list[int], list[float], GenerateResult, int]:
    """(ids, logprobs, result, number of deltas) of a backend stream."""
    ids: list[int] = []
    lps: list[float] = []
    deltas = 0
    result = None
    async for delta in stream:
        deltas += 1
        ids += delta.token_ids
        lps += delta.logprobs
        result = delta.result or result
    assert result is not None, "the stream ended without a result"
    return ids, lps, result, deltas


@contextmanager
def served(app: Any) -> Iterator[str]:
    from agentr1.gateway.server import BackgroundServer

    with BackgroundServer(app, ready_path="/health", startup_timeout_s=60) as url:
        yield url
