"""Rollout orchestration: run the agent n times per task through the gateway, bounded and timed.

Every run is one session tagged with the run, the task group (the n samples of one task in one
training step) and the policy version the gateway serves. A run that raises or times out leaves
a failed session whose error names the failure kind (``agentr1.sdk.failures``): it is counted, and
excluded from the update; its group is then dropped or resampled (``agentr1.trainer.groups``).

A run whose session could not even be opened (``POST /sessions`` failed: the gateway or its store
down, refusing, or too slow) has no session to store: it is kept in ``RolloutReport.unopened`` with
its group and failure kind (``backend`` or ``timeout`` for the gateway's errors), counted as failed,
and the group completer counts it as a missing member of its group, like a failed session.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentr1.core import frozen_heap
from agentr1.sdk import ActiveSession, areward, failure_kind, run_command, session
from agentr1.trainer.agent_processes import AgentProcesses
from agentr1.trainer.config import AgentConfig
from agentr1.trainer.tasks import load_callable


@dataclass(frozen=True)
class UnopenedSession:
    """A run whose session the gateway never created: the member of its group that is missing."""

    group_id: str
    task_id: str
    sample: int
    kind: str  # agentr1.sdk.failures kind of the error POST /sessions raised
    error: str


@dataclass
class RolloutReport:
    sessions: list[str] = field(default_factory=list)
    unopened: list[UnopenedSession] = field(default_factory=list)
    finished: int = 0
    failed: int = 0
    timed_out: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # the first few, for the log

    def merge(self, other: RolloutReport) -> None:
        """Add ``other``'s sessions and counts (a session run elsewhere: ``agent.processes``)."""
        self.sessions.extend(other.sessions)
        self.unopened.extend(other.unopened)
        self.finished += other.finished
        self.failed += other.failed
        self.timed_out += other.timed_out
        self.errors.extend(other.errors[:max(0, 5 - len(self.errors))])


def use_session_threads(sessions: int) -> None:
    """Sync agents run on the running loop's default executor, one thread a session: make room for ``sessions``
    of them at once. asyncio's own executor has min(32, cpus + 4) threads, and the sessions beyond it waited for
    others to end (a rollout in waves). Threads start as sessions need them."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=sessions + 4))


class AgentRunner:
    """Runs the configured agent for one task inside the current session."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.fn: Callable[..., Any] | None = load_callable(config.entrypoint) if config.entrypoint else None
        # A decorated agent would open its own session; run the function it wraps instead.
        while self.fn is not None and hasattr(self.fn, "__wrapped__"):
            self.fn = self.fn.__wrapped__
        self.workers: AgentProcesses | None = None
        if config.processes > 1:
            self.workers = AgentProcesses(config.model_dump(), config.processes)

    def close(self) -> None:
        """Stop the worker processes, if any (sessions still in flight there are cancelled)."""
        if self.workers is not None:
            self.workers.close()

    async def run(self, task: dict[str, Any], *, run_id: str, group_id: str, sample: int, step: int,
                  report: RolloutReport, on_open: Callable[[ActiveSession], None] | None = None) -> None:
        """One session of the agent on ``task``, counted into ``report``. ``on_open``: told the session as soon
        as the gateway opened it (an entrypoint agent's; a worker process tells the trainer, which fails the
        session in the store should the worker die)."""
        if self.workers is not None:
            report.merge(await self.workers.run(task, run_id=run_id, group_id=group_id, sample=sample, step=step))
            return
        timeout = self.config.timeout_s
        if self.config.command is not None:
            try:  # run_command opens the session first: an error before the command ran is that
                result = await asyncio.to_thread(run_command, self.config.command, task, timeout_s=timeout,
                                                 task_id=task["id"], group_id=group_id, run_id=run_id)
            except Exception as exc:
                self._unopened(report, exc, task=task, group_id=group_id, sample=sample)
                return
            report.sessions.append(result.session_id)
            self._count(report, ok=result.ok, timed_out=result.timed_out, error=result.stderr[-300:])
            return
        assert self.fn is not None
        metadata: dict[str, Any] = {"step": step, "sample": sample}
        if self.config.context is not None:  # the gateway applies it to every call of the session
            metadata["context"] = self.config.context
        opened = False
        try:
            async with session(task_id=task["id"], group_id=group_id, run_id=run_id, metadata=metadata,
                               new=True) as active:
                opened = True
                report.sessions.append(active.id)
                if on_open is not None:
                    on_open(active)
                call = self.fn(task) if inspect.iscoroutinefunction(self.fn) else asyncio.to_thread(self.fn, task)
                result = await asyncio.wait_for(call, timeout)
                if isinstance(result, int | float) and not isinstance(result, bool):
                    await areward(float(result), name="agent")
        except Exception as exc:
            if not opened:
                self._unopened(report, exc, task=task, group_id=group_id, sample=sample)
            elif isinstance(exc, TimeoutError):
                self._count(report, ok=False, timed_out=True, error=f"timed out after {timeout:.0f} s")
            else:
                self._count(report, ok=False, timed_out=False, error=f"{type(exc).__name__}: {exc}")
        else:
            self._count(report, ok=True, timed_out=False, error="")

    def _unopened(self, report: RolloutReport, exc: Exception, *, task: dict[str, Any], group_id: str,
                  sample: int) -> None:
        kind = failure_kind(exc)
        error = f"could not open a session (POST /sessions): {type(exc).__name__}: {exc}"
        report.unopened.append(UnopenedSession(group_id, str(task["id"]), sample, kind, error))
        self._count(report, ok=False, timed_out=kind == "timeout", error=error)

    @staticmethod
    def _count(report: RolloutReport, *, ok: bool, timed_out: bool, error: str) -> None:
        if ok:
            report.finished += 1
            return
        report.failed += 1
        report.timed_out += timed_out
        if len(report.errors) < 5:
            report.errors.append(error)


async def collect(runner: AgentRunner, tasks: list[dict[str, Any]], *, n: int, run_id: str, step: int,
                  max_concurrency: int, on_done: Callable[[], None] | None = None) -> RolloutReport:
    """Run ``n`` samples of every task, at most ``max_concurrency`` at a time."""
    report = RolloutReport()
    limit = asyncio.Semaphore(max_concurrency)
    started = time.monotonic()

    async def one(task: dict[str, Any], sample: int) -> None:
        async with limit:
            await runner.run(task, run_id=run_id, group_id=f"{run_id}/step{step}/{task['id']}", sample=sample,
                             step=step, report=report)
        if on_done is not None:
            on_done()

    with frozen_heap():  # a full collection of the trainer's heap would stall the gateway mid-rollout
        await asyncio.gather(*(one(task, k) for task in tasks for k in range(n)))
    report.seconds = time.monotonic() - started
    return report
