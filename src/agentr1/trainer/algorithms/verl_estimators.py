"""Estimators verl has: thin adapters that call ``verl.trainer.ppo.core_algos`` on trajectory tensors.

Trajectory-level estimators (grpo, rloo, reinforce_plus_plus_baseline) sum a trajectory's
rewards (every step's reward, outcome included) into its return, normalise it within its task
group as verl does, and give that advantage to every action token of every step of the
trajectory (the Agent-R1 convention): all rows of one session share it. Token-level ones
(reinforce_plus_plus, gae) run verl's recursion over the trajectory's action tokens in step order,
so the return of a step's tokens includes the rewards of the later steps.

verl's ``masked_whiten`` (used by gae, reinforce_plus_plus, reinforce_plus_plus_baseline) refuses a
mask that sums to 0 or 1. An empty batch never reaches an estimator; for a batch of one action
token the trajectory is passed twice (whitening one number gives 0 either way, up to verl's 1e-8
guards; returns are per trajectory) and the first copy is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from agentr1.trainer.algorithms.config import AdvantageConfig
from agentr1.trainer.algorithms.registry import register_adv_est
from agentr1.trainer.algorithms.trajectories import TrajectoryBatch

__all__ = ["core_algos"]


def core_algos() -> Any:
    """verl's ``core_algos`` module (imported on first use: importing verl takes seconds)."""
    from verl.trainer.ppo import core_algos as module

    return module


def _whitening_safe(batch: TrajectoryBatch,
                    call: Callable[[TrajectoryBatch], tuple[torch.Tensor, torch.Tensor]]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    if batch.num_tokens != 1:
        return call(batch)
    t = int(batch.response_mask.sum(dim=-1).argmax())
    keep = [t, t]
    twice = dataclasses.replace(
        batch,
        session_ids=[batch.session_ids[t]] * 2,
        index=batch.index[keep],
        token_level_rewards=batch.token_level_rewards[keep],
        response_mask=batch.response_mask[keep],
        step_ids=batch.step_ids[keep],
        values=None if batch.values is None else batch.values[keep],
        anchors=[batch.anchors[t]] * 2,
        source=batch.source[keep],
    )
    adv, ret = call(twice)
    advantages = torch.zeros_like(batch.token_level_rewards)
    returns = torch.zeros_like(batch.token_level_rewards)
    advantages[t], returns[t] = adv[0], ret[0]
    return advantages, returns


@register_adv_est("grpo")
def grpo(batch: TrajectoryBatch, cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return core_algos().compute_grpo_outcome_advantage(
        token_level_rewards=batch.token_level_rewards, response_mask=batch.response_mask, index=batch.index,
        epsilon=cfg.epsilon, norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo)


@register_adv_est("rloo")
def rloo(batch: TrajectoryBatch, cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return core_algos().compute_rloo_outcome_advantage(
        token_level_rewards=batch.token_level_rewards, response_mask=batch.response_mask, index=batch.index,
        epsilon=cfg.epsilon)


@register_adv_est("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(batch: TrajectoryBatch, cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return _whitening_safe(batch, lambda b: core_algos().compute_reinforce_plus_plus_baseline_outcome_advantage(
        token_level_rewards=b.token_level_rewards, response_mask=b.response_mask, index=b.index,
        epsilon=cfg.epsilon, config=cfg.algo_config()))


@register_adv_est("reinforce_plus_plus", level="token")
def reinforce_plus_plus(batch: TrajectoryBatch, cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return _whitening_safe(batch, lambda b: core_algos().compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=b.token_level_rewards, response_mask=b.response_mask, config=cfg.algo_config()))


@register_adv_est("gae", needs_values=True, level="token")
def gae(batch: TrajectoryBatch, cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return _whitening_safe(batch, lambda b: core_algos().compute_gae_advantage_return(
        token_level_rewards=b.token_level_rewards, values=b.values, response_mask=b.response_mask,
        gamma=cfg.gamma, lam=cfg.lam))
