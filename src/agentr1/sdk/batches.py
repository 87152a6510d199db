"""Open and end many sessions in few requests: :class:`SessionBatches`.

A rollout opens hundreds of sessions at once and ends them as their agents return. One request per
session and per end costs the gateway an HTTP request each (its parsing, routing, a store transaction):
about as much CPU again as the session's model call, on the one event loop that also serves the calls
(docs/benchmarks.md, "Sessions opened and finished"). :class:`SessionBatches` gathers what is asked at
about the same moment into one ``POST /sessions`` with a list (one transaction) and one
``POST /sessions/finish``. There is at most one request of each kind in flight: what is asked while one
is on its way goes in the next, so a lone session waits for nothing and a burst costs a few requests.

The sessions opened here are run with ``session(active=...)``, which neither opens nor ends them, and
ended with :meth:`SessionBatches.finish`. ``gateway_url`` names the gateway (default: the configured one); a
session is ended through the batches that opened it (a gateway's shards each keep their own sessions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from agentr1.sdk.client import arequest, as_session, create_many_call, finish_many_call, gateway_error
from agentr1.sdk.context import ActiveSession
from agentr1.sdk.errors import GatewayConnectionError, SessionAlreadyFinished

Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_BATCH = 512  # sessions in one request (the gateway takes up to 4,096)


class _Coalesced(Generic[Item, Result]):
    """Items submitted on one event loop, sent in lists by ``send`` (one list in flight at a time). ``send`` returns
    a result or an exception for each item, in order; an exception it raises is every item's."""

    def __init__(self, send: Callable[[list[Item]], Awaitable[Sequence[Result | BaseException]]],
                 max_batch: int) -> None:
        self.send, self.max_batch = send, max_batch
        self.waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self.sender: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self.waiting.append((item, future))
        if self.sender is None:  # runs after the tasks ready now: those that ask at the same moment join in
            self.sender = asyncio.create_task(self._send_all())
        return await future

    async def _send_all(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting[:self.max_batch], self.waiting[self.max_batch:]
                try:
                    results: Sequence[Result | BaseException] = await self.send([item for item, _ in batch])
                    if len(results) != len(batch):
                        raise RuntimeError(f"the gateway answered {len(results)} results for {len(batch)} sessions")
                except Exception as exc:
                    results = [exc] * len(batch)
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():  # (its caller was cancelled)
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self.sender = None


class SessionBatches:
    """Opens and ends sessions for the code of one event loop, many to a request (see the module's text)."""

    def __init__(self, *, max_batch: int = MAX_BATCH, gateway_url: str | None = None) -> None:
        self.gateway_url = gateway_url
        self._opens: _Coalesced[dict[str, Any], ActiveSession] = _Coalesced(self._open, max_batch)
        self._ends: _Coalesced[tuple[ActiveSession, str, float | None, str | None], None] = _Coalesced(
            self._finish, max_batch)

    async def open(self, *, run_id: str | None = None, task_id: str | None = None, group_id: str | None = None,
                   metadata: dict[str, Any] | None = None) -> ActiveSession:
        """A new session (as ``session(...)`` opens one); the errors of ``POST /sessions``."""
        return await self._opens.submit({"run_id": run_id, "task_id": task_id, "group_id": group_id,
                                         "metadata": metadata})

    async def finish(self, active: ActiveSession, status: str = "finished", *, reward: float | None = None,
                     error: str | None = None) -> None:
        """End ``active`` (``reward``: its outcome reward); ``SessionAlreadyFinished`` if it had ended, the gateway's
        other errors as ``POST /sessions/{id}/finish`` gives them."""
        await self._ends.submit((active, status, reward, error))

    async def _open(self, sessions: list[dict[str, Any]]) -> list[ActiveSession]:
        method, path, _, body = create_many_call(sessions)
        answers: Any = await arequest(method, path, json=body, url=self.gateway_url)
        return [as_session(answer, self.gateway_url) for answer in answers]

    async def _finish(self, ends: list[tuple[ActiveSession, str, float | None, str | None]]) -> list[Exception | None]:
        method, path, _, body = finish_many_call(ends)
        retried = False
        try:
            answer = await arequest(method, path, json=body, url=self.gateway_url)
        except GatewayConnectionError:  # once more: a session left running records no outcome
            answer, retried = await arequest(method, path, json=body, url=self.gateway_url), True
        results: list[Exception | None] = []
        for item in answer["results"]:
            error = item.get("error")
            failure = None if error is None else gateway_error(item.get("status_code", 400), error.get("message", ""),
                                                               error.get("code"))
            if retried and isinstance(failure, SessionAlreadyFinished):
                failure = None  # the first try ended it
            results.append(failure)
        return results

