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
import itertools
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentr1.core import frozen_heap, gil_switch_interval
from agentr1.sdk import ActiveSession, SessionBatches, failure_error_text, failure_kind, run_command, session
from agentr1.trainer.agent_processes import AgentProcesses
from agentr1.trainer.agent_session import SessionOutcome
from agentr1.trainer.config import AgentConfig
from agentr1.trainer.tasks import load_callable

log = logging.getLogger("agentr1.trainer.rollout")

SAMPLE_SEED_STRIDE = 7_919_003  # a task's k-th sample runs under seed_offset k * this (agentr1.gateway.sampling_override)


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


class AgentRunner:
    """Runs the configured agent for one task in a session of its own.

    Sessions are opened and ended many to a request (``agentr1.sdk.SessionBatches``, one per event loop and
    gateway): one request each would cost the gateway two more HTTP requests per session, as much CPU as the model
    call. ``gateways``: the gateways to spread sessions over, in turn (``Serving.rollout_urls``: the gateway's
    processes); default the configured one (``agentr1.sdk.configure``)."""

    def __init__(self, config: AgentConfig, *, gateways: list[str] | None = None) -> None:
        self.config = config
        self.gateways: list[str | None] = list(gateways or [None])
        self._turn = itertools.count()
        self.fn: Callable[..., Any] | None = load_callable(config.entrypoint) if config.entrypoint else None
        # A decorated agent would open its own session; run the function it wraps instead.
        while self.fn is not None and hasattr(self.fn, "__wrapped__"):
            self.fn = self.fn.__wrapped__
        self.workers: AgentProcesses | None = None
        if config.processes > 1:
            self.workers = AgentProcesses(config.model_dump(), config.processes, player=worker_runner)
        self._batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[SessionBatches]] = \
            weakref.WeakKeyDictionary()

    def close(self) -> None:
        """Stop the worker processes, if any (sessions still in flight there are cancelled)."""
        if self.workers is not None:
            self.workers.close()

    async def run(self, task: dict[str, Any], *, run_id: str, group_id: str, sample: int, step: int,
                  report: RolloutReport, sampling: dict[str, Any] | None = None) -> str | None:
        """One session of the agent on ``task``, counted into ``report``; its id (None: it could not be opened).
        ``sampling``: how the gateway decodes every call of the session, whatever the agent asks
        (``agentr1.gateway.sampling_override``: an evaluation's ``{"temperature": 0}``); the ``sample``-th sample of
        a task gets its own ``seed_offset``, so seeded agents' samples differ."""
        metadata: dict[str, Any] = {"step": step, "sample": sample}
        if sampling is not None:
            metadata["sampling"] = {**sampling, "seed_offset": sample * SAMPLE_SEED_STRIDE}
        if self.config.command is not None:
            return await self._run_command(task, run_id=run_id, group_id=group_id, sample=sample, report=report,
                                           metadata=metadata)
        if self.config.context is not None:  # the gateway applies it to every call of the session
            metadata["context"] = self.config.context
        loop = asyncio.get_running_loop()
        per_gateway = self._batches.get(loop) or self._batches.setdefault(
            loop, [SessionBatches(gateway_url=url) for url in self.gateways])
        batches = per_gateway[next(self._turn) % len(per_gateway)]  # the session is opened and ended there
        try:
            active = await batches.open(task_id=task["id"], group_id=group_id, run_id=run_id, metadata=metadata)
        except Exception as exc:
            self._unopened(report, exc, task=task, group_id=group_id, sample=sample)
            return None
        report.sessions.append(active.id)
        outcome = await (self.workers.run(task, active) if self.workers is not None else self.play(task, active))
        try:
            await batches.finish(active, outcome.status, reward=outcome.reward, error=outcome.error)
        except Exception as exc:
            if outcome.ok:  # the session stays running in the store: not a finished trajectory
                outcome = SessionOutcome("failed", summary=f"could not finish the session: {type(exc).__name__}: "
                                                           f"{exc}")
            else:
                log.warning("could not mark session %s failed: %s", active.id, exc)
        self._count(report, ok=outcome.ok, timed_out=outcome.timed_out, error=outcome.summary)
        return active.id

    async def play(self, task: dict[str, Any], active: ActiveSession) -> SessionOutcome:
        """Run the agent on ``task`` in the open session ``active``; how it ended (the session is left open)."""
        assert self.fn is not None
        timeout = self.config.timeout_s
        try:
            async with session(active=active):
                call = self.fn(task) if inspect.iscoroutinefunction(self.fn) else asyncio.to_thread(self.fn, task)
                result = await asyncio.wait_for(call, timeout)
        except Exception as exc:
            timed_out = isinstance(exc, TimeoutError)
            summary = f"timed out after {timeout:.0f} s" if timed_out else f"{type(exc).__name__}: {exc}"
            return SessionOutcome("failed", error=failure_error_text(exc), timed_out=timed_out, summary=summary)
        number = isinstance(result, int | float) and not isinstance(result, bool)
        return SessionOutcome("finished", reward=float(result) if number else None)

    async def _run_command(self, task: dict[str, Any], *, run_id: str, group_id: str, sample: int,
                           report: RolloutReport, metadata: dict[str, Any]) -> str | None:
        assert self.config.command is not None
        try:  # run_command opens the session first: an error before the command ran is that
            result = await asyncio.to_thread(run_command, self.config.command, task, timeout_s=self.config.timeout_s,
                                             task_id=task["id"], group_id=group_id, run_id=run_id, metadata=metadata)
        except Exception as exc:
            self._unopened(report, exc, task=task, group_id=group_id, sample=sample)
            return None
        report.sessions.append(result.session_id)
        self._count(report, ok=result.ok, timed_out=result.timed_out, error=result.stderr[-300:])
        return result.session_id

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


def worker_runner(agent_config: dict[str, Any]) -> AgentRunner:
    """The runner inside an agent worker process (``agentr1.trainer.agent_processes``): it plays the sessions
    it is sent in that process."""
    return AgentRunner(AgentConfig.model_validate({**agent_config, "processes": 1}))


async def collect(runner: AgentRunner, tasks: list[dict[str, Any]], *, n: int, run_id: str, step: int,
                  max_concurrency: int, on_done: Callable[[str | None], None] | None = None,
                  switch_interval_s: float | None = None, sampling: dict[str, Any] | None = None,
                  group_prefix: str | None = None) -> RolloutReport:
    """Run ``n`` samples of every task, at most ``max_concurrency`` at a time. ``switch_interval_s``: this process's
    GIL switch interval while they run (``agentr1.core.gil_switch_interval``; None: Python's). ``sampling``: the
    sessions' sampling override (:meth:`AgentRunner.run`). A task's group is ``<group_prefix>/<task id>``
    (default prefix ``<run_id>/step<step>``). ``on_done``: called with each session's id (None: never opened) as
    its run ends."""
    prefix = group_prefix or f"{run_id}/step{step}"
    report = RolloutReport()
    limit = asyncio.Semaphore(max_concurrency)
    started = time.monotonic()

    async def one(task: dict[str, Any], sample: int) -> None:
        async with limit:
            session_id = await runner.run(task, run_id=run_id, group_id=f"{prefix}/{task['id']}", sample=sample,
                                          step=step, report=report, sampling=sampling)
        if on_done is not None:
            on_done(session_id)

    # a full collection of the trainer's heap would stall the gateway mid-rollout
    with frozen_heap(), gil_switch_interval(switch_interval_s):
        await asyncio.gather(*(one(task, k) for task in tasks for k in range(n)))
    report.seconds = time.monotonic() - started
    return report
