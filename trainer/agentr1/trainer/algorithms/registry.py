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

from agentr1.trainer.algorithms.config import AdvantageConfig
from agentr1.trainer.algorithms.trajectories import TrajectoryBatch

__all__ = ["EstimatorFn", "EstimatorSpec", "MetricsFn", "get_adv_estimator", "list_adv_estimators", "register_adv_est"]

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


_REGISTRY: dict[str, EstimatorSpec] = {}


def register_adv_est(name: str, *, needs_values: bool = False, level: str = "trajectory",
                     source: str = "verl", metrics: MetricsFn | None = None) -> Callable[[EstimatorFn], EstimatorFn]:
    def decorator(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered: {_REGISTRY[name].fn!r}")
        _REGISTRY[name] = EstimatorSpec(name, fn, needs_values, level, source, metrics)
        return fn

    return decorator


def list_adv_estimators() -> list[str]:
    return sorted(_REGISTRY)


def get_adv_estimator(name: str) -> EstimatorSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; valid: {', '.join(list_adv_estimators())}") from None
