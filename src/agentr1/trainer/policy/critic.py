"""The critic (value model, for GAE-style estimators): its values, and its fit to the rows' returns with verl's clipped
``value_loss``."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch

from agentr1.trainer.padded import PaddedBatch

from .config import PolicyConfig
from .updates import TrainedModel, mean_metrics, perf_metrics, run_epochs

__all__ = ["Critic", "critic_loss_config"]


def critic_loss_config(config: PolicyConfig) -> Any:
    """verl's ``FSDPCriticConfig`` for ``value_loss``, from the policy's settings."""
    from verl.workers.config import FSDPCriticConfig

    return FSDPCriticConfig(
        strategy="fsdp2",
        use_dynamic_bsz=config.ppo_micro_batch_size_per_gpu is None,
        ppo_micro_batch_size_per_gpu=config.ppo_micro_batch_size_per_gpu,
        cliprange_value=config.cliprange_value,
        loss_agg_mode=config.critic_loss_agg_mode,
        loss_scale_factor=config.loss_scale_factor,
    )


class Critic:
    """The critic model and its optimizer steps (``version``); ``generator`` shuffles the mini-batches (shared with
    the actor's updates, so the order of both is the one seed's)."""

    def __init__(self, model: TrainedModel, config: PolicyConfig, *, generator: torch.Generator) -> None:
        self.model = model
        self.config = config
        self.loss_config = critic_loss_config(config)
        self.generator = generator
        self.version = 0  # optimizer steps taken by update() calls

    def values(self, batch: PaddedBatch) -> torch.Tensor:
        """(B, R) the value of the state before each response token."""
        return self.model.infer(batch)["values"]

    def update(self, batch: PaddedBatch) -> dict[str, float]:
        """Fit the critic to ``batch``'s ``returns`` (``ppo_epochs`` x mini-batches); ``critic/*`` metrics."""
        from verl.workers.utils.losses import value_loss

        started = time.perf_counter()
        if "values" not in batch.extra:  # values from values() (same weights) save a pass
            batch.extra["values"] = self.values(batch)
        loss_fn = partial(value_loss, self.loss_config)
        steps, skipped = run_epochs(self.model, batch, loss_fn, ["values", "returns"], config=self.config,
                                    generator=self.generator, temperature=1.0)
        metrics: dict[str, float] = {}
        if steps:
            metrics["critic/lr"] = self.model.lr
            self.model.lr_step()
            self.version += 1
        metrics.update(mean_metrics(steps, "critic/"))
        metrics.update(perf_metrics(batch, len(steps), skipped, time.perf_counter() - started, "critic/",
                                    ppo_epochs=self.config.ppo_epochs))
        return metrics
