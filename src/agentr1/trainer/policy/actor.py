"""The actor's updates: a PPO step in verl's dataflow (old log-probs, rollout correction, reference log-probs, epochs x
mini-batches of ``ppo_loss``) and a supervised step (``sft_loss``); both count the policy's ``version``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

import torch

from agentr1.trainer.padded import PaddedBatch

from .config import PolicyConfig, verl_actor_config
from .memory_budget import MemoryPlan
from .reference import Reference
from .updates import TrainedModel, mean_metrics, perf_metrics, require, run_epochs

__all__ = ["Actor"]


class Actor:
    """The actor model and its optimizer steps (``version``). ``reference``: the frozen model of the KL term
    (``use_kl_loss``); ``generator`` shuffles the mini-batches; ``memory_plan``'s settings are reported with each
    update."""

    def __init__(self, model: TrainedModel, config: PolicyConfig, *, reference: Reference | None,
                 generator: torch.Generator, memory_plan: MemoryPlan) -> None:
        self.model = model
        self.config = config
        self.loss_config = verl_actor_config(config)
        self.reference = reference
        self.generator = generator
        self.memory_plan = memory_plan
        self.version = 0  # optimizer steps taken by ppo_update() and sft_update() calls

    def log_probs(self, batch: PaddedBatch, *, temperature: float = 1.0) -> torch.Tensor:
        """(B, R) the current policy's log-probs of the response tokens, 0.0 where the mask is 0."""
        return self.model.infer(batch, temperature=temperature)["log_probs"] * batch.response_mask

    def ppo_update(self, batch: PaddedBatch, *, temperature: float = 1.0,
                   old_log_probs: Sequence[Sequence[float]] | None = None) -> dict[str, float]:
        """One PPO step on ``batch`` (advantages filled in; a batch this call may change); verl-named metrics.

        ``old_log_probs``: the behaviour policy's log-probs per row, when the caller computed them; by default the
        actor recomputes them now (or takes the rows' rollout log-probs in ``bypass_mode``)."""
        from verl.workers.utils.losses import ppo_loss

        cfg = self.config
        started = time.perf_counter()
        metrics: dict[str, float] = {}
        mask = batch.response_mask
        missing = ~batch.has_rollout_log_probs  # rows whose steps came without rollout log-probs
        batch.extra["rollout_log_probs"] = batch.extra["rollout_log_probs"].float()  # as verl reads them
        if old_log_probs is not None:
            old = batch.response_tensor(old_log_probs)
        elif cfg.bypass_mode and not missing.any():
            old = batch.extra["rollout_log_probs"].clone()
        else:
            out = self.model.infer(batch, temperature=temperature, entropy=cfg.calculate_entropy)
            old = out["log_probs"]
            if "entropy" in out and mask.any():
                metrics["actor/entropy"] = self._agg(out["entropy"], mask)
            if cfg.bypass_mode:
                old = torch.where(missing[:, None], old, batch.extra["rollout_log_probs"])
        # no rollout log-probs: the row is taken as on-policy (IS weight 1, never rejected)
        rollout = batch.extra["rollout_log_probs"]
        batch.extra["rollout_log_probs"] = torch.where(missing[:, None], old, rollout)
        batch.extra["old_log_probs"] = old
        keys = ["old_log_probs", "advantages"]
        if not cfg.bypass_mode and mask.any():
            metrics.update(self._rollout_correction(batch))
            if "rollout_is_weights" in batch.extra:
                keys.append("rollout_is_weights")
        if cfg.use_kl_loss:
            reference = require(self.reference, "use_kl_loss")
            batch.extra["ref_log_prob"] = reference.log_probs(batch, temperature=temperature)
            keys.append("ref_log_prob")

        loss_fn = partial(ppo_loss, self.loss_config)
        steps, skipped = run_epochs(self.model, batch, loss_fn, keys, config=cfg, generator=self.generator,
                                    temperature=temperature, calculate_entropy=cfg.entropy_coeff != 0)
        if steps:
            metrics["actor/lr"] = self.model.lr
            self.model.lr_step()
            self.version += 1
        metrics.update(mean_metrics(steps, "actor/"))
        elapsed = time.perf_counter() - started
        metrics.update(perf_metrics(batch, len(steps), skipped, elapsed, "actor/", ppo_epochs=cfg.ppo_epochs))
        metrics.update(self.memory_plan.metrics())  # the memory settings in force, "auto" or set
        return metrics

    def sft_update(self, batch: PaddedBatch) -> dict[str, float]:
        """One optimizer step of supervised fine-tuning with verl's ``sft_loss``: the negative log-likelihood of the
        tokens where ``response_mask`` is 1, averaged over those tokens (``sft/loss``, before the step)."""
        from verl.workers.utils.losses import sft_loss

        started = time.perf_counter()
        if batch.num_action_tokens == 0:
            raise ValueError("the rows have no action tokens (response_mask is 0 everywhere): nothing to learn")
        out = self.model.train(batch, partial(sft_loss, config=None), keys=[], temperature=1.0,
                               sequence_loss_mask=True)
        metrics = {"sft/loss": out.pop("loss"), "sft/lr": self.model.lr}
        metrics.update({f"sft/{key.split('/', 1)[-1]}": value for key, value in out.items()})
        self.model.lr_step()
        self.version += 1
        metrics.update(perf_metrics(batch, 1, 0, time.perf_counter() - started, "sft/",
                                    ppo_epochs=self.config.ppo_epochs))
        return metrics

    def _rollout_correction(self, batch: PaddedBatch) -> dict[str, float]:
        """verl's rollout correction between recomputed and rollout log-probs (IS weights, rejection)."""
        from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

        cfg = self.config
        weights, mask, metrics = compute_rollout_correction_and_rejection_mask(
            old_log_prob=batch.extra["old_log_probs"],
            rollout_log_prob=batch.extra["rollout_log_probs"],
            response_mask=batch.response_mask,
            rollout_is=cfg.rollout_is,
            rollout_is_threshold=cfg.rollout_is_threshold,
            rollout_is_batch_normalize=cfg.rollout_is_batch_normalize,
            rollout_rs=cfg.rollout_rs,
            rollout_rs_threshold=cfg.rollout_rs_threshold,
        )
        batch.response_mask = mask.to(batch.response_mask.dtype)
        if weights is not None:
            batch.extra["rollout_is_weights"] = weights.batch["rollout_is_weights"].float()
        return {k if k.startswith("rollout_corr/") else f"rollout_corr/{k}": float(v) for k, v in metrics.items()}

    def _agg(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        from verl.trainer.ppo.core_algos import agg_loss

        return float(agg_loss(loss_mat=values, loss_mask=mask.bool(), loss_agg_mode=self.config.loss_agg_mode))
