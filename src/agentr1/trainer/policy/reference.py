"""The frozen reference model (``use_kl_loss``): its log-probs for the KL term of the loss, and the KL itself."""

from __future__ import annotations

import torch

from agentr1.trainer.padded import PaddedBatch

from .updates import TrainedModel

__all__ = ["Reference"]


class Reference:
    """The reference model, inference only; ``kl_loss_type``: verl's ``kl_penalty`` name."""

    def __init__(self, model: TrainedModel, *, kl_loss_type: str) -> None:
        self.model = model
        self.kl_loss_type = kl_loss_type

    def log_probs(self, batch: PaddedBatch, *, temperature: float = 1.0) -> torch.Tensor:
        """(B, R) the reference's log-probs of the response tokens (unmasked, as verl's loss reads them)."""
        return self.model.infer(batch, temperature=temperature)["log_probs"]

    def kl_from(self, actor: TrainedModel, batch: PaddedBatch, *, temperature: float = 1.0) -> float:
        """verl's ``kl_penalty`` between the ``actor``'s log-probs and the reference's, token-mean on the mask."""
        from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

        ref = self.log_probs(batch, temperature=temperature)
        cur = actor.infer(batch, temperature=temperature)["log_probs"]
        if not batch.response_mask.any():
            return 0.0
        kl = kl_penalty(logprob=cur, ref_logprob=ref, kl_penalty=self.kl_loss_type)  # type: ignore[arg-type]
        return float(agg_loss(loss_mat=kl, loss_mask=batch.response_mask.bool(), loss_agg_mode="token-mean"))
