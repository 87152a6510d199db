"""The advantage stage: a padded batch in, its ``advantages`` and ``returns`` filled, metrics out.

:func:`compute_batch_advantages` is the stage the trainer runs, on the tensors it built once from the rows
(:class:`~agentr1.trainer.padded.PaddedBatch`). :func:`compute_advantages` is the same stage for a caller holding
rows (the viewer, tests): it pads them, runs the stage and writes ``TrainRow.advantages`` / ``TrainRow.returns``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

from agentr1.trainer.algorithms.config import AdvantageConfig
from agentr1.trainer.algorithms.registry import EstimatorSpec, get_adv_estimator
from agentr1.trainer.algorithms.trajectories import TrajectoryBatch, gather_trajectories, scatter_advantages
from agentr1.trainer.padded import PaddedBatch, pad_rows
from agentr1.trainer.rows import TrainRow

__all__ = ["compute_advantages", "compute_batch_advantages"]


def compute_batch_advantages(batch: PaddedBatch, config: AdvantageConfig | None = None) -> dict[str, float]:
    """Set ``batch.extra["advantages"]`` and ``["returns"]`` (response-aligned float64, 0 off action tokens).

    Dispatches through the registry by ``config.adv_estimator``; an unknown name fails listing the
    valid ones. Raises if the inputs (rewards, values) or the outputs are not finite.
    """
    cfg = config or AdvantageConfig()
    spec = get_adv_estimator(cfg.adv_estimator)
    trajectories = gather_trajectories(batch, need_values=spec.needs_values)
    advantages, returns, metrics = _estimate(spec, trajectories, cfg)
    scatter_advantages(batch, trajectories, advantages, returns)
    return metrics


def compute_advantages(rows: Sequence[TrainRow], config: AdvantageConfig | None = None) -> dict[str, float]:
    """Fill ``advantages`` and ``returns`` (response-aligned, 0.0 off action tokens) on every row, in place:
    :func:`compute_batch_advantages` on the rows padded."""
    cfg = config or AdvantageConfig()
    spec = get_adv_estimator(cfg.adv_estimator)
    if not rows:
        return _estimate(spec, TrajectoryBatch.empty(), cfg)[2]
    batch = pad_rows(rows)
    metrics = compute_batch_advantages(batch, cfg)
    for row, advantages, returns in zip(rows, batch.unpad(batch.extra["advantages"]),
                                        batch.unpad(batch.extra["returns"]), strict=True):
        row.advantages, row.returns = advantages, returns
    return metrics


def _estimate(spec: EstimatorSpec, batch: TrajectoryBatch,
              cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """The estimator on the trajectory tensors: (advantages, returns, metrics), checked finite."""
    _check_finite("token rewards", batch.token_level_rewards)
    if batch.values is not None:
        _check_finite("values", batch.values)
    if batch.num_tokens == 0:
        advantages = returns = torch.zeros_like(batch.token_level_rewards)
    else:
        advantages, returns = spec.fn(batch, cfg)
        mask = batch.response_mask
        advantages, returns = advantages.double() * mask, returns.double() * mask
        _check_finite(f"advantages from {spec.name!r}", advantages)
        _check_finite(f"returns from {spec.name!r}", returns)
    metrics = _metrics(batch, advantages)
    if cfg.advantage_floor is not None:
        mask = batch.response_mask > 0
        floored = mask & (advantages < cfg.advantage_floor)
        metrics["adv/floored_tokens"] = float(floored.sum())
        advantages = torch.where(floored, torch.full_like(advantages, cfg.advantage_floor), advantages)
    if spec.metrics is not None:
        metrics.update(spec.metrics(batch))
    return advantages, returns, metrics


def _check_finite(what: str, x: torch.Tensor) -> None:
    if not bool(torch.isfinite(x).all()):
        raise FloatingPointError(f"{what} contain NaN or inf")


def _metrics(batch: TrajectoryBatch, advantages: torch.Tensor) -> dict[str, float]:
    returns = batch.token_level_rewards.sum(dim=-1).tolist()
    groups: dict[object, list[float]] = defaultdict(list)
    for group, value in zip(batch.index.tolist(), returns, strict=True):
        groups[group].append(value)
    mask = batch.response_mask > 0
    chosen = advantages[mask]
    return {
        "adv/trajectories": float(len(returns)),
        "adv/steps": float(batch.num_steps),
        "adv/tokens": float(batch.num_tokens),
        "adv/groups": float(len(groups)),
        "adv/singleton_groups": float(sum(len(v) == 1 for v in groups.values())),
        "adv/zero_variance_groups": float(sum(len(v) > 1 and max(v) == min(v) for v in groups.values())),
        "adv/mean": float(chosen.mean()) if chosen.numel() else 0.0,
        "adv/abs_max": float(chosen.abs().max()) if chosen.numel() else 0.0,
        "reward/trajectory_mean": sum(returns) / len(returns) if returns else 0.0,
    }
