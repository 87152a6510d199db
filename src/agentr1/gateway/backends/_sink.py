"""The bridge from the local engine's worker to the event loop: a row's tokens and its result or error
handed to the asyncio future (plain calls) or queue (streamed calls) that waits for them."""

from __future__ import annotations

import asyncio
from typing import Any

from agentr1.core.generation import GenerateResult, StreamDelta

__all__ = ["Sink"]


class Sink:
    """Hands a row's tokens to the event loop that waits for them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, streaming: bool) -> None:
        self.loop = loop
        self.future: asyncio.Future[GenerateResult] | None = None if streaming else loop.create_future()
        self.queue: asyncio.Queue[StreamDelta | BaseException] | None = asyncio.Queue() if streaming else None

    def _call(self, fn: Any, *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def delta(self, token_ids: list[int], logprobs: list[float], tops: list[Any] | None = None) -> None:
        if self.queue is not None:
            self._call(self.queue.put_nowait, StreamDelta(list(token_ids), list(logprobs),
                                                          top_logprobs=None if tops is None else list(tops)))

    def prompt(self, logprobs: list[float | None], tops: list[Any]) -> None:
        if self.queue is not None:  # a plain call gets them with its result
            self._call(self.queue.put_nowait, StreamDelta([], [], prompt_logprobs=list(logprobs),
                                                          prompt_top_logprobs=list(tops)))

    def result(self, result: GenerateResult, token_ids: list[int], logprobs: list[float]) -> None:
        if self.queue is not None:
            self._call(self.queue.put_nowait, StreamDelta(list(token_ids), list(logprobs), result=result))
        else:
            self._call(_resolve, self.future, result, None)

    def error(self, exc: BaseException) -> None:
        if self.queue is not None:
            self._call(self.queue.put_nowait, exc)
        else:
            self._call(_resolve, self.future, None, exc)


def _resolve(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)
