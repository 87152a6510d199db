"""What :meth:`agentr1.trainer.loop.Trainer.setup` builds for a run, declared in one place: :class:`RunState`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentr1.store import TraceStore
from agentr1.trainer.checkpoints import TrainerState
from agentr1.trainer.distill import Distiller
from agentr1.trainer.groups import GroupCompleter
from agentr1.trainer.rollout import AgentRunner
from agentr1.trainer.scoring import Scorer
from agentr1.trainer.serving import Serving
from agentr1.trainer.sources import StepSource
from agentr1.trainer.tasks import TaskSampler
from agentr1.trainer.tracking import Tracker

if TYPE_CHECKING:
    from agentr1.trainer.policy import LocalPolicy

__all__ = ["RunState", "TrainerNotSetUp"]


class TrainerNotSetUp(RuntimeError):
    """A trainer was used before :meth:`~agentr1.trainer.loop.Trainer.setup` built its :class:`RunState`."""


@dataclass
class RunState:
    """A run's parts, as setup built them (each field is set by setup; none is added later)."""

    store: TraceStore  # the run's trace store (sessions, steps, images)
    model_path: Path  # the policy's starting model directory
    progress: TrainerState  # step, task position, run id, policy version: what a checkpoint keeps
    policy: LocalPolicy  # the policy trained (in this process or on Ray workers)
    scorer: Scorer  # reward functions (+ judge)
    serving: Serving | None  # the gateway in front of the rollout backend; None when training offline
    train_tasks: list[dict[str, Any]]
    val_tasks: list[dict[str, Any]]  # the held-out tasks the trainer evaluates on (val, or test)
    runner: AgentRunner | None  # runs the agent; None without an agent (offline)
    groups: GroupCompleter  # drops or completes the task groups with a failed member
    distiller: Distiller | None  # on-policy distillation's teacher (algorithm.distill)
    sampler: TaskSampler  # the training tasks, in order, from the saved position
    tracker: Tracker  # metrics, progress display, curves
    source: StepSource  # where each step's sessions come from (sync, async or offline)
    # the engine's counters and the clock when the current step's window began
    engine_mark: tuple[float, dict[str, float]] = field(default_factory=lambda: (time.monotonic(), {}))
