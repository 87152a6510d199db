"""StepPO: step-level GAE (Agent-R1). One value per step, TD over steps, broadcast over the action.

For a trajectory with steps t = 0..K-1, step reward r_t (the sum of the rewards on the step's
tokens) and step value V_t = V(o_t) (the critic's value before the step's first action token,
i.e. ``values`` at the first action token, verl's response-aligned convention):

    delta_t = r_t + gamma * V_{t+1} - V_t        (V_K = 0: the trajectory ends)
    A_t     = delta_t + gamma * lam * A_{t+1}
    R_t     = A_t + V_t                          (the value target of step t)

Advantages are whitened over the steps of the batch (each step counted once, however long its
action) when ``norm_adv`` is set; every action token of step t gets A_t, and R_t as its return.
"""

from __future__ import annotations

import torch

from agentr1.trainer.algorithms.config import AdvantageConfig
from agentr1.trainer.algorithms.registry import register_adv_est
from agentr1.trainer.algorithms.steps import (
    broadcast_steps,
    num_steps,
    step_first_positions,
    step_sums,
    valid_tokens,
)
from agentr1.trainer.algorithms.trajectories import TrajectoryBatch

__all__ = ["compute_steppo_advantage_return"]


def compute_steppo_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    step_ids: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step-level GAE on (bs, L) tensors, one row per trajectory; ``step_ids`` (bs, L) numbers each
    token's step within its trajectory (0, 1, ... in time order; -1 off steps)."""
    with torch.no_grad():
        valid = valid_tokens(response_mask, step_ids)
        n = num_steps(step_ids, valid)
        rewards = step_sums(token_level_rewards.double(), step_ids, valid, n)
        first, exists = step_first_positions(step_ids, valid, n)
        step_values = values.double().gather(1, first) * exists if n else torch.zeros_like(rewards)

        advantages = torch.zeros_like(rewards)
        last_gae = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
        next_value = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
        for t in reversed(range(n)):
            here = exists[:, t]
            delta = rewards[:, t] + gamma * next_value - step_values[:, t]
            last_gae = torch.where(here, delta + gamma * lam * last_gae, last_gae)
            next_value = torch.where(here, step_values[:, t], next_value)
            advantages[:, t] = torch.where(here, last_gae, torch.zeros_like(last_gae))
        returns = (advantages + step_values) * exists

        if norm_adv and n:
            chosen = advantages[exists]
            mean = chosen.mean()
            var = chosen.var(unbiased=True) if chosen.numel() > 1 else torch.zeros((), dtype=chosen.dtype)
            advantages = (advantages - mean) * torch.rsqrt(var + 1e-8) * exists
        return broadcast_steps(advantages, step_ids, valid), broadcast_steps(returns, step_ids, valid)


@register_adv_est("steppo", needs_values=True, level="step", source="agentr1")
def steppo(batch: TrajectoryBatch, cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    assert batch.values is not None
    return compute_steppo_advantage_return(batch.token_level_rewards, batch.values, batch.response_mask,
                                           batch.step_ids, cfg.gamma, cfg.lam, cfg.steppo_norm_adv)
