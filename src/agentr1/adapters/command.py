"""Agents you cannot touch at all, run as commands: many tasks, ``samples`` runs each, in parallel.

    from agentr1.adapters.command import python, run_tasks
    results = run_tasks(python("my_agent.py"), tasks, samples=4, workers=4)

Each run is :func:`agentr1.sdk.run_command` (its own session; ``OPENAI_BASE_URL``/``OPENAI_API_KEY``
and ``AGENTR1_TASK`` in its environment; ``AGENTR1_REWARD=<x>`` on stdout is its reward). The
``samples`` runs of one task share its id as ``group_id`` (a GRPO group).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentr1.sdk import RunResult, run_command

__all__ = ["python", "run_tasks"]


def python(script: str, *args: str) -> list[str]:
    """The command that runs ``script`` with this interpreter (and so this virtual environment)."""
    return [sys.executable, script, *args]


def run_tasks(command: Sequence[str], tasks: Sequence[dict[str, Any]], *, samples: int = 1, workers: int = 4,
              run_id: str | None = None, **options: Any) -> list[RunResult]:
    """Run ``command`` ``samples`` times per task (tasks need an ``id``); results in task-major order.
    ``options`` go to :func:`run_command` (``timeout_s``, ``cwd``, ``env``, ``reward_fn``)."""

    def one(job: tuple[dict[str, Any], int]) -> RunResult:
        task, _ = job
        task_id = str(task["id"])
        return run_command(command, task, task_id=task_id, group_id=task_id, run_id=run_id, **options)

    jobs = [(task, k) for task in tasks for k in range(samples)]
    with ThreadPoolExecutor(max(1, min(workers, len(jobs) or 1))) as pool:
        return list(pool.map(one, jobs))
