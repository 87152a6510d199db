"""Advantage estimators: verl's (grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, gae)
and ours in verl's registry form (steppo, gigpo), dispatched by name."""

from agentr1.trainer.algorithms import gigpo as _gigpo  # noqa: F401  (registers "gigpo")
from agentr1.trainer.algorithms import steppo as _steppo  # noqa: F401  (registers "steppo")
from agentr1.trainer.algorithms import verl_estimators as _verl  # noqa: F401  (registers verl's)
from agentr1.trainer.algorithms.advantages import compute_advantages, compute_batch_advantages
from agentr1.trainer.algorithms.config import AdvantageConfig
from agentr1.trainer.algorithms.gigpo import compute_gigpo_advantage
from agentr1.trainer.algorithms.registry import (
    EstimatorFn,
    EstimatorSpec,
    get_adv_estimator,
    list_adv_estimators,
    register_adv_est,
)
from agentr1.trainer.algorithms.steppo import compute_steppo_advantage_return
from agentr1.trainer.algorithms.trajectories import TrajectoryBatch, gather_trajectories, scatter_advantages

__all__ = [
    "AdvantageConfig",
    "EstimatorFn",
    "EstimatorSpec",
    "TrajectoryBatch",
    "compute_advantages",
    "compute_batch_advantages",
    "compute_gigpo_advantage",
    "compute_steppo_advantage_return",
    "gather_trajectories",
    "get_adv_estimator",
    "list_adv_estimators",
    "register_adv_est",
    "scatter_advantages",
]
