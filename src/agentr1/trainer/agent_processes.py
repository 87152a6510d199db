"""Agents in worker processes (``agent.processes: N``): the agents' Python off the gateway's GIL.

In ``agentr1 train`` the embedded gateway runs on a thread of the trainer's process, and so do the
agents (an event loop, or a thread pool for sync agents). Every model call costs Python time on both
sides: the agent's client and SDK calls, the gateway's request handling and store writes. With the
engine on a GPU that Python is the rollout's limit (``bench/rollout_bench.py``: 128 chains sessions on
the H200 held the GIL for about as long as the rollout took). With ``processes`` > 1 the sessions run
in that many spawned worker processes, each with its own event loop and GIL; the gateway keeps the
trainer's.

The trainer opens each session and ends it (many to a request); :class:`AgentProcesses` hands the open
session and its task to the worker with the fewest sessions in flight (each worker runs any number at
once, as the trainer's own loop does), which runs the agent in it and answers how it ended
(:class:`~agentr1.trainer.agent_session.SessionOutcome`). A worker that dies fails the sessions it had in
flight (failure kind ``agent``, their error names the exit code), and is replaced on the next session.
Workers are spawned, not forked
(the trainer holds CUDA and threads), when the pool is made: their start (imports, ~1-2 s) is not paid
inside the first rollout. Each imports the agent's module itself, so the entrypoint must be importable
by name (as it must be for ``agentr1 train`` anyway); each session carries the SDK's configuration
(:func:`agentr1.sdk.configuration`) of the moment it is sent, so a worker talks to the gateway the
trainer configured even if that came after the pool was made.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from agentr1.core import freeze_heap
from agentr1.sdk import ActiveSession, configuration, configure, tagged_error
from agentr1.trainer.agent_session import SessionOutcome, use_session_threads

log = logging.getLogger("agentr1.trainer.agents")

WORKER_SESSIONS = 1024  # sync sessions a worker runs at once, at most (the trainer bounds what it sends)

__all__ = ["AgentProcesses", "Player"]


class Player(Protocol):
    """What a worker plays its sessions with (``agentr1.trainer.rollout.AgentRunner``), built in the worker by
    the ``player`` given to :class:`AgentProcesses` (a module-level function: it is sent to a spawned process)."""

    async def play(self, task: dict[str, Any], active: ActiveSession) -> SessionOutcome: ...


@dataclass
class _Worker:
    index: int
    process: Any  # multiprocessing.Process (spawn context)
    conn: Connection
    in_flight: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = field(default_factory=dict)
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    ready: threading.Event = field(default_factory=threading.Event)  # it has imported the agent
    dead: str | None = None  # why, once it is


class AgentProcesses:
    """``processes`` spawned workers that run :class:`AgentRunner` sessions for this process."""

    def __init__(self, agent_config: dict[str, Any], processes: int, *, player: Callable[[dict[str, Any]], Player]
                 ) -> None:
        if processes < 2:
            raise ValueError(f"AgentProcesses needs at least 2 processes, got {processes}")
        self.agent_config, self.processes, self.player = agent_config, processes, player
        self._jobs = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._workers = [self._start(i) for i in range(processes)]

    def _start(self, index: int) -> _Worker:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_worker_main, args=(child, self.agent_config, self.player),
                                  name=f"agentr1-agents-{index}", daemon=True)
        process.start()
        child.close()
        worker = _Worker(index, process, parent)
        threading.Thread(target=self._read, args=(worker,), name=f"agentr1-agents-{index}-reader",
                         daemon=True).start()
        return worker

    def _pick(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise RuntimeError("the agent processes were closed")
            for i, worker in enumerate(self._workers):
                if worker.dead is not None:
                    log.warning("agent worker %d %s: starting a new one", worker.index, worker.dead)
                    self._workers[i] = self._start(worker.index)
            return min(self._workers, key=lambda w: len(w.in_flight))

    async def run(self, task: dict[str, Any], active: ActiveSession) -> Any:
        """The agent on ``task`` in the open session ``active``, in a worker; its :class:`SessionOutcome`."""
        worker = self._pick()
        job = next(self._jobs)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            worker.in_flight[job] = (loop, future)
        try:
            with worker.send_lock:
                worker.conn.send((job, task, active, configuration()))
        except (OSError, EOFError, ValueError) as exc:  # the pipe broke: the worker is gone
            self._fail(worker, f"could not take the session ({type(exc).__name__}: {exc})")
        return await future

    def _read(self, worker: _Worker) -> None:
        """The worker's answers, on a thread of its own: each resolves its session's future."""
        while True:
            try:
                job, report = worker.conn.recv()
            except (EOFError, OSError):
                worker.process.join(timeout=5)
                self._fail(worker, f"exited (code {worker.process.exitcode})")
                return
            if job is None:  # the worker's greeting: the agent is imported, sessions start at once now
                worker.ready.set()
                continue
            with self._lock:
                loop, future = worker.in_flight.pop(job, (None, None))
            if future is not None:
                loop.call_soon_threadsafe(_settle, future, report, None)

    def _fail(self, worker: _Worker, why: str) -> None:
        with self._lock:
            worker.dead = worker.dead or why
            pending, worker.in_flight = worker.in_flight, {}
        for loop, future in pending.values():
            error = f"agent worker process {worker.index} {worker.dead} with this session in flight"
            outcome = SessionOutcome("failed", error=tagged_error("agent", error), summary=error)
            loop.call_soon_threadsafe(_settle, future, outcome, None)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Block until every worker has started and imported the agent (a benchmark's clock starts after)."""
        for worker in list(self._workers):
            if not worker.ready.wait(timeout_s) and worker.dead is None:
                raise TimeoutError(f"agent worker process {worker.index} did not start in {timeout_s:g} s")

    def close(self) -> None:
        """Stop the workers (their sessions in flight are cancelled)."""
        with self._lock:
            self._closed, workers = True, list(self._workers)
        for worker in workers:
            try:
                with worker.send_lock:
                    worker.conn.send(None)
            except (OSError, EOFError, ValueError):
                pass
        for worker in workers:
            worker.process.join(timeout=10)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(timeout=5)
            worker.conn.close()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if not future.done():
        future.set_result(result) if error is None else future.set_exception(error)


def _worker_main(conn: Connection, agent_config: dict[str, Any], player: Callable[[dict[str, Any]], Player]) -> None:
    """A worker: runs every session it is sent at once on its own event loop, answers each when it ends."""
    runner = player(agent_config)
    freeze_heap()  # the imports and the agent's module: no full collection walks them mid-rollout
    conn.send((None, None))

    async def one(job: int, task: dict[str, Any], active: ActiveSession, sdk_configuration: dict[str, Any]) -> None:
        if sdk_configuration != configuration():  # the gateway the trainer's SDK points at, when it was sent
            configure(**sdk_configuration)
        try:
            outcome = await runner.play(task, active)
        except Exception as exc:  # (play counts the agent's own errors: this is its own failing)
            error = f"agent worker: {type(exc).__name__}: {exc}"
            outcome = SessionOutcome("failed", error=tagged_error("agent", error), summary=error)
        conn.send((job, outcome))

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        use_session_threads(WORKER_SESSIONS)
        running: set[asyncio.Task[None]] = set()
        while True:
            message = await loop.run_in_executor(None, _receive, conn)
            if message is None:
                break
            task = asyncio.create_task(one(*message))
            running.add(task)
            task.add_done_callback(running.discard)
        for task in running:
            task.cancel()

    asyncio.run(serve())


def _receive(conn: Connection) -> Any:
    try:
        return conn.recv()
    except (EOFError, OSError):  # the trainer is gone
        return None
