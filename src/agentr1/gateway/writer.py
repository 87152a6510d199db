"""Background persistence of steps with group commit.

Each answered call hands its step (and the feedback e_t of the step before it) to the writer.
The writer commits whatever has queued up in one transaction, so 64 concurrent calls cost one
commit, not 64. Durability contract:

- ``write.durable`` on (default): the gateway answers a call only after the transaction that
  holds its step has committed. An answered call is a stored step, even if the gateway is killed
  right after. If the commit fails, the agent gets an error instead of an answer.
- ``write.durable`` off: the answer goes out first; the step commits within
  the next commit (plus ``write.interval_ms``). A crash in that window loses those steps; the
  steps the writer could not commit are logged with their session ids.

Graceful shutdown always flushes the queue.

Where the commit runs: on the event loop itself when the store can do it without waiting (SQLite whose
write lock is free at that moment: the commit is then CPU only, which a worker thread would spend holding
the GIL all the same, plus two hand-offs); otherwise, and always on PostgreSQL, in a worker thread, so a
lock held by another process or a network round trip never stalls the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from agentr1.store import DATABASE_UNAVAILABLE, FeedbackRecord, StepRecord, StoreError, TraceStore

log = logging.getLogger("agentr1.gateway.writer")
DATABASE_DOWN = DATABASE_UNAVAILABLE  # the connection or the lock failed, not one step


@dataclass(slots=True)
class _Item:
    step: StepRecord | None
    feedback: FeedbackRecord | None
    done: asyncio.Future[None]


def _records(batch: list[_Item]) -> tuple[list[StepRecord], list[FeedbackRecord]]:
    """The steps and the feedback of a batch (flush markers carry neither)."""
    return [i.step for i in batch if i.step is not None], [i.feedback for i in batch if i.feedback is not None]


class StepWriter:
    def __init__(self, store: TraceStore, *, batch_size: int = 256, interval_s: float = 0.005) -> None:
        self.store = store
        self.batch_size = batch_size
        self.interval_s = interval_s
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.committed = 0
        self.failed = 0
        self.last_commit_lag_s = 0.0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="agentr1-step-writer")

    async def close(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def submit(self, step: StepRecord | None, feedback: FeedbackRecord | None = None) -> asyncio.Future[None]:
        """Queue a step (and/or feedback); the future resolves when it is committed."""
        if self._task is None or self._task.done():
            raise RuntimeError("step writer is not running")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Item(step, feedback, done))
        return done

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        if self._task is None:
            return
        marker = self.submit(None)
        await asyncio.shield(marker)

    async def _run(self) -> None:
        # Natural group commit: whatever queued up while the previous commit ran goes in the next
        # one. No artificial wait: a lone call is committed at once, a busy gateway batches itself.
        while True:
            batch = [await self._queue.get()]
            if self.interval_s > 0:
                await asyncio.sleep(self.interval_s)
            while not self._queue.empty() and len(batch) < self.batch_size:
                batch.append(self._queue.get_nowait())
            await self._commit(batch)

    async def _commit(self, batch: list[_Item]) -> None:
        started = time.monotonic()
        try:
            steps, feedback = _records(batch)  # (a batch of flush markers alone writes nothing)
            if (steps or feedback) and not self.store.try_append_steps(steps, feedback):  # in place if no wait
                await asyncio.to_thread(self.store.append_steps, steps, feedback)
        except DATABASE_DOWN:
            await self._commit_again(batch)
        except Exception:
            # One bad item must not sink the others: retry them one by one.
            for item in batch:
                try:
                    await asyncio.to_thread(self._write, [item])
                except Exception as exc:
                    self._fail(item, exc)
                else:
                    self._succeed(item)
        else:
            for item in batch:
                self._succeed(item)
        self.last_commit_lag_s = time.monotonic() - started

    async def _commit_again(self, batch: list[_Item]) -> None:
        """The database, not an item, failed (a dropped connection, a lock held past the busy timeout):
        one more try of the whole batch on a fresh connection, then fail them all. Retrying item by item
        here would wait out the lock once per item, holding every later commit back."""
        try:
            await asyncio.to_thread(self._write, batch)
        except Exception as exc:
            for item in batch:
                self._fail(item, exc)
        else:
            for item in batch:
                self._succeed(item)

    def _write(self, batch: list[_Item]) -> None:
        self.store.append_steps(*_records(batch))

    def _succeed(self, item: _Item) -> None:
        self.committed += item.step is not None
        if not item.done.done():
            item.done.set_result(None)

    def _fail(self, item: _Item, exc: Exception) -> None:
        self.failed += 1
        what = f"step {item.step.session_id}/{item.step.index}" if item.step else "feedback"
        log.error("could not store %s: %s", what, exc)
        if not item.done.done():
            item.done.set_exception(exc if isinstance(exc, StoreError) else StoreError(str(exc)))
            item.done.add_done_callback(lambda f: f.exception())  # non-durable callers never await it
