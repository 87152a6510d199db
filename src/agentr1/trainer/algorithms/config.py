"""Typed configuration of the advantage stage (verl's names where verl has them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AdvantageConfig"]


@dataclass(slots=True)
class AdvantageConfig:
    adv_estimator: str = "grpo"  # verl: algorithm.adv_estimator
    gamma: float = 1.0  # verl: algorithm.gamma (token-level for gae / reinforce_plus_plus, step-level for ours)
    lam: float = 1.0  # verl: algorithm.lam
    norm_adv_by_std_in_grpo: bool = True  # verl: algorithm.norm_adv_by_std_in_grpo (grpo and both GiGPO levels)
    epsilon: float = 1e-6  # added to group std before dividing
    step_advantage_w: float = 1.0  # GiGPO: weight of the step-level (anchor group) advantage
    steppo_norm_adv: bool = True  # StepPO: whiten step advantages over the steps of the batch
    # advantages below it are raised to it after the estimator (None: as estimated). 0.0 learns only from what
    # beat its baseline (on-policy rejection sampling, as RAFT / ReST): no push away from failed samples
    advantage_floor: float | None = None

    def algo_config(self) -> Any:
        """verl's ``AlgoConfig`` with these values (verl is imported lazily: it takes seconds)."""
        from verl.trainer.config import AlgoConfig

        return AlgoConfig(gamma=self.gamma, lam=self.lam, adv_estimator=self.adv_estimator,
                          norm_adv_by_std_in_grpo=self.norm_adv_by_std_in_grpo)
