"""Advantage estimator registry: one typed signature, dispatch by name (verl's registry form).

Every entry computes on a :class:`TrajectoryBatch` (one tensor row per trajectory, see
``trajectories.py``) and returns ``(advantages, returns)`` shaped like its ``response_mask``.
Entries backed by verl convert to the tensors verl's function expects and call it; the
step-level ones (``steppo``, ``gigpo``) are ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentr1.core import Registry
from agentr1.trainer.algorithms.config import AdvantageConfig
from agentr1.trainer.algorithms.trajectories import TrajectoryBatch

__all__ = ["ESTIMATORS", "EstimatorFn", "EstimatorSpec", "MetricsFn", "get_adv_estimator", "list_adv_estimators", "register_adv_est"]

EstimatorFn = Callable[[TrajectoryBatch, AdvantageConfig], tuple[torch.Tensor, torch.Tensor]]
MetricsFn = Callable[[TrajectoryBatch], dict[str, float]]


@dataclass(frozen=True, slots=True)
class EstimatorSpec:
    name: str
    fn: EstimatorFn
    needs_values: bool = False  # needs critic values on the rows (TrainRow.values)
    level: str = "trajectory"  # "trajectory", "token" or "step": the granularity of the credit
    source: str = "verl"  # "verl" (dispatches to verl.trainer.ppo.core_algos) or "agentr1"
    metrics: MetricsFn | None = None  # estimator-specific metrics of a batch (e.g. GiGPO's step groups)


ESTIMATORS: Registry[EstimatorSpec] = Registry("advantage estimator")


def register_adv_est(name: str, *, needs_values: bool = False, level: str = "trajectory",
                     source: str = "verl", metrics: MetricsFn | None = None) -> Callable[[EstimatorFn], EstimatorFn]:
    def decorator(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS and ESTIMATORS.get(name).fn is fn:
            return fn  # the same function again (a module imported twice)
        ESTIMATORS.add(name, EstimatorSpec(name, fn, needs_values, level, source, metrics))
        return fn

    return decorator


def list_adv_estimators() -> list[str]:
    return ESTIMATORS.names()


def get_adv_estimator(name: str) -> EstimatorSpec:
    """The estimator registered as ``name``; an unknown name raises ``UnknownName`` (a ValueError)."""
    return ESTIMATORS.get(name)
