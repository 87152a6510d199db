"""One agent session as the trainer runs it, in this process or in an agent worker process
(``agentr1.trainer.agent_processes``): how it ended (:class:`SessionOutcome`) and the threads sync agents run on
(:func:`use_session_threads`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agentr1.core import OpenMPReleasingExecutor

__all__ = ["SessionOutcome", "use_session_threads"]


def use_session_threads(sessions: int) -> None:
    """Sync agents run on the running loop's default executor, one thread a session: make room for ``sessions``
    of them at once. asyncio's own executor has min(32, cpus + 4) threads, and the sessions beyond it waited for
    others to end (a rollout in waves). Threads start as sessions need them. Each ends its OpenMP workers after each
    job (the trainer's padding and updates run there too), so the engine's thread is the one left with a pool
    (``agentr1.core.openmp``)."""
    asyncio.get_running_loop().set_default_executor(OpenMPReleasingExecutor(max_workers=sessions + 4))


@dataclass(frozen=True)
class SessionOutcome:
    """How an agent's run in its session ended: what the session is finished with, and what the report counts."""

    status: str  # "finished" or "failed"
    reward: float | None = None  # the agent's own outcome reward (a number it returned)
    error: str | None = None  # the failed session's error, its failure kind first (agentr1.sdk.failures)
    timed_out: bool = False
    summary: str = ""  # one line for the rollout's log

    @property
    def ok(self) -> bool:
        return self.status == "finished"
