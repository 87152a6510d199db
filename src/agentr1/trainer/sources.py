"""Where a training step's sessions come from: the one swappable part of the training loop.

The loop (:class:`agentr1.trainer.loop.Trainer`) is the same for every source: take a step's data,
learn from it (rows, advantages, verl update, weight sync), end the step (state, evaluation,
metrics, checkpoint). A source is a :class:`StepSource`:

- :class:`SyncRollouts` (``trainer.mode: sync``): the step's tasks are rolled out now with the
  current policy, scored (``agentr1.trainer.scoring``) and completed (``agentr1.trainer.groups``);
- :class:`agentr1.trainer.async_loop.AsyncRollouts` (``trainer.mode: async``): a producer keeps
  rollouts running during updates; a step takes the next complete, fresh groups;
- :class:`agentr1.trainer.offline.OfflineSteps` (``offline``): sessions already in a store.

A source sees the trainer only through :class:`TrainerContext`: its config and the parts of the run that setup built
(:class:`RunParts`, the fields of :class:`agentr1.trainer.run_state.RunState` a source reads).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from agentr1.store import SessionRecord
from agentr1.trainer.checkpoints import TrainerState
from agentr1.trainer.config import JobConfig
from agentr1.trainer.groups import GroupCompleter
from agentr1.trainer.rewards import SessionRewards
from agentr1.trainer.rollout import AgentRunner, collect
from agentr1.trainer.scoring import Scorer, outcome_metrics
from agentr1.trainer.tasks import TaskSampler
from agentr1.trainer.tracking import Tracker

__all__ = ["RunParts", "StepData", "StepSource", "SyncRollouts", "TrainerContext"]

log = logging.getLogger("agentr1.trainer")


@dataclass
class StepData:
    """One step's training data: scored sessions, their rewards, and the source's metrics."""

    sessions: list[SessionRecord]
    rewards: dict[str, SessionRewards]
    metrics: dict[str, float]


class RunParts(Protocol):
    """What a source may use of the run's parts (fields of :class:`agentr1.trainer.run_state.RunState`)."""

    progress: TrainerState
    runner: AgentRunner | None
    sampler: TaskSampler
    scorer: Scorer
    groups: GroupCompleter
    tracker: Tracker


class TrainerContext(Protocol):
    """What a source may use of the trainer (:class:`agentr1.trainer.loop.Trainer`): a source is built during setup
    and reads :attr:`run` only once it is called, after setup."""

    config: JobConfig

    @property
    def run(self) -> RunParts: ...


class StepSource:
    """The data of each training step; the hooks default to doing nothing."""

    def __init__(self, trainer: TrainerContext) -> None:
        self.trainer = trainer

    async def start(self) -> None:
        """Called once before the first step (after the step-0 evaluation)."""

    async def take(self, step: int) -> StepData:
        """The data of training step ``step`` (1-based)."""
        raise NotImplementedError

    def after_update(self, step: int, data: StepData, metrics: dict[str, float]) -> None:
        """Called after the update of ``step``: the source may add metrics or write its records."""

    async def close(self) -> None:
        """Called once when training ends (also on errors)."""


class SyncRollouts(StepSource):
    """Each step rolls out ``data.train_batch_size`` tasks x ``rollout.n`` with the current policy."""

    async def take(self, step: int) -> StepData:
        config, run = self.trainer.config, self.trainer.run
        rollout = config.actor_rollout_ref.rollout
        assert run.runner is not None
        tasks = run.sampler.take(config.data.train_batch_size)
        by_id = {task["id"]: task for task in tasks}
        run.tracker.status(f"rollout: {len(tasks)} tasks x {rollout.n}")
        report = await collect(run.runner, tasks, n=rollout.n, run_id=run.progress.run_id, step=step,
                               max_concurrency=rollout.max_concurrency, switch_interval_s=rollout.switch_interval_s)
        for error in report.errors:
            log.warning("rollout failure: %s", error)
        sessions, rewards = await asyncio.to_thread(run.scorer.score, report.sessions, by_id)
        sessions, rewards = await run.groups.complete(by_id, sessions, rewards, step=step, unopened=report.unopened)
        min_version = run.progress.policy_version - rollout.max_staleness
        fresh = [s for s in sessions if s.status == "finished" and s.policy_version >= min_version]
        return StepData(fresh, {s.id: rewards[s.id] for s in fresh}, {
            "rollout/sessions": float(len(report.sessions)), "rollout/failed": float(report.failed),
            "rollout/timed_out": float(report.timed_out), "rollout/unopened": float(len(report.unopened)),
            "rollout/stale": float(len(sessions) - len(fresh)),
            "rollout/seconds": report.seconds,
            **outcome_metrics(fresh, rewards, success_key="success/train", reward_key="reward/mean"),
        })
