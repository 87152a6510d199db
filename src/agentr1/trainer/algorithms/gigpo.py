"""GiGPO (Group-in-Group Policy Optimization, Feng et al. 2025): episode- and step-level groups.

- Episode level: the trajectory return R(tau) normalised within its task group: verl's GRPO,
  given to every action token of the trajectory.
- Step level: steps of the task group's trajectories that share an anchor state (the same anchor
  key: the state the environment named for the step, ``env:...``, see ``agentr1.sdk.anchor``; by
  default a hash of the step's exact observation ids, ``ids:...``) form a step group; each step's discounted return
  G_t = r_t + gamma * G_{t+1} is normalised within its step group, again by verl's GRPO, and
  broadcast over the step's action tokens. A step alone in its anchor group gets step advantage 0
  (the paper's formula: nothing to compare with; verl-agent's code instead keeps the raw return).
- A = A_episode + step_advantage_w * A_step. ``norm_adv_by_std_in_grpo`` picks mean-std
  normalisation (True) or mean-only ("mean_norm", False) at both levels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from agentr1.trainer.algorithms.config import AdvantageConfig
from agentr1.trainer.algorithms.registry import register_adv_est
from agentr1.trainer.algorithms.steps import broadcast_steps, num_steps, step_sums, valid_tokens
from agentr1.trainer.algorithms.trajectories import TrajectoryBatch
from agentr1.trainer.algorithms.verl_estimators import core_algos

__all__ = ["anchor_groups", "compute_gigpo_advantage", "discounted_step_returns", "step_group_metrics"]


def discounted_step_returns(step_rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """(T, S) G_t = r_t + gamma * G_{t+1} along each row."""
    returns = torch.zeros_like(step_rewards)
    running = torch.zeros(step_rewards.shape[0], dtype=step_rewards.dtype)
    for t in reversed(range(step_rewards.shape[1])):
        running = step_rewards[:, t] + gamma * running
        returns[:, t] = running
    return returns


def anchor_groups(index: Sequence[Hashable], anchor_index: Sequence[Sequence[Hashable]],
                  exists: torch.Tensor) -> dict[tuple[Hashable, Hashable], list[tuple[int, int]]]:
    """(task group, anchor key) -> the (trajectory, step) pairs in that step group."""
    groups: dict[tuple[Hashable, Hashable], list[tuple[int, int]]] = defaultdict(list)
    for t, s in exists.nonzero().tolist():
        anchors = anchor_index[t]
        if s >= len(anchors) or anchors[s] is None:
            raise ValueError(f"gigpo needs an anchor key for every step (trajectory {t}, step {s} has none)")
        groups[(index[t], anchors[s])].append((t, s))
    return dict(groups)


def compute_gigpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    step_ids: torch.Tensor,
    anchor_index: Sequence[Sequence[Hashable]],
    gamma: float = 1.0,
    step_advantage_w: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO on (bs, L) tensors, one row per trajectory. ``index`` (bs,) is the task group of each
    trajectory, ``step_ids`` (bs, L) each token's step ordinal (-1 off steps) and
    ``anchor_index[b][s]`` the anchor key of step ``s`` of trajectory ``b``."""
    core = core_algos()
    with torch.no_grad():
        episode, _ = core.compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
            epsilon=epsilon, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)

        valid = valid_tokens(response_mask, step_ids)
        n = num_steps(step_ids, valid)
        rewards = step_sums(token_level_rewards.double(), step_ids, valid, n)
        exists = step_sums(torch.ones_like(token_level_rewards, dtype=torch.float64), step_ids, valid, n) > 0
        step_returns = discounted_step_returns(rewards, gamma)

        step_adv = torch.zeros_like(rewards)
        members = [m for m in anchor_groups(index.tolist(), anchor_index, exists).values() if len(m) > 1]
        if members:
            flat = [ts for m in members for ts in m]
            keys = np.array([k for k, m in enumerate(members) for _ in m], dtype=object)
            scores = torch.stack([step_returns[t, s] for t, s in flat]).unsqueeze(-1)
            normed, _ = core.compute_grpo_outcome_advantage(
                token_level_rewards=scores, response_mask=torch.ones_like(scores), index=keys,
                epsilon=epsilon, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
            for (t, s), value in zip(flat, normed[:, 0].tolist(), strict=True):
                step_adv[t, s] = value

        advantages = episode * valid + step_advantage_w * broadcast_steps(step_adv, step_ids, valid)
    return advantages, advantages


ENV_ANCHOR_PREFIX = "env:"  # anchor keys the environment named (agentr1.trainer.batch.env_anchor)


def step_group_metrics(batch: TrajectoryBatch) -> dict[str, float]:
    """GiGPO's step groups in a batch: how many formed (more than one step shares a task group and an
    anchor), how many of those from anchors the environment named, and the steps they hold."""
    groups: dict[tuple[object, object], int] = defaultdict(int)
    for t, anchors in enumerate(batch.anchors):
        for key in anchors:
            groups[(batch.index[t], key)] += 1
    formed = {k: n for k, n in groups.items() if n > 1}
    env = {k: n for k, n in formed.items() if str(k[1]).startswith(ENV_ANCHOR_PREFIX)}
    return {
        "gigpo/step_groups": float(len(formed)),
        "gigpo/step_groups_env": float(len(env)),
        "gigpo/steps_grouped": float(sum(formed.values())),
        "gigpo/steps_grouped_env": float(sum(env.values())),
        "gigpo/steps_env_anchor": float(sum(str(k).startswith(ENV_ANCHOR_PREFIX) for a in batch.anchors for k in a)),
    }


@register_adv_est("gigpo", level="step", source="agentr1", metrics=step_group_metrics)
def gigpo(batch: TrajectoryBatch, cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return compute_gigpo_advantage(batch.token_level_rewards, batch.response_mask, batch.index, batch.step_ids,
                                   batch.anchors, gamma=cfg.gamma, step_advantage_w=cfg.step_advantage_w,
                                   epsilon=cfg.epsilon, norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo)
