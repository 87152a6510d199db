"""Row builders and plain-PyTorch references for the policy tests (imported by test_policy.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agentr1.trainer.rows import TrainRow


def make_row(
    prompt: Sequence[int],
    response: Sequence[int],
    *,
    mask: Sequence[int] | None = None,
    advantage: float | Sequence[float] = 1.0,
    rollout_logprob: float = -3.0,
) -> TrainRow:
    """A hand-built row: advantages on masked tokens, rollout log-probs on action tokens."""
    mask = list(mask) if mask is not None else [1] * len(response)
    advantages = list(advantage) if isinstance(advantage, Sequence) else [advantage] * len(response)
    return TrainRow(
        prompt_ids=list(prompt),
        response_ids=list(response),
        response_mask=mask,
        old_logprobs=[rollout_logprob if m else 0.0 for m in mask],
        token_rewards=[0.0] * len(response),
        segments=[],
        session_id="session",
        group_id="group",
        advantages=[a * m for a, m in zip(advantages, mask, strict=True)],
        returns=[1.0 if m else 0.0 for m in mask],
    )


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


# -- plain PyTorch / transformers references --------------------------------------------------


def load_plain_model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")


def plain_logprobs(model: torch.nn.Module, rows: Sequence[TrainRow], temperature: float = 1.0) -> list[torch.Tensor]:
    """Each row alone (no padding, no packing): log p(response token | everything before it)."""
    out = []
    for row in rows:
        ids = torch.tensor([row.prompt_ids + row.response_ids])
        logits = model(input_ids=ids).logits[0, len(row.prompt_ids) - 1 : -1].float() / temperature
        targets = torch.tensor(row.response_ids)[:, None]
        out.append(torch.log_softmax(logits, dim=-1).gather(-1, targets)[:, 0])
    return out


def plain_vanilla_ppo_loss(
    log_probs: Sequence[torch.Tensor],
    old_log_probs: Sequence[torch.Tensor],
    rows: Sequence[TrainRow],
    *,
    clip_ratio: float = 0.2,
    clip_ratio_c: float = 3.0,
) -> tuple[torch.Tensor, list[float]]:
    """verl's vanilla (dual-clip) PPO loss with token-mean aggregation over all rows; returns the
    loss and each row's clip fraction (verl reports the mean over micro-batches of their fraction)."""
    total = torch.zeros(())
    fractions = []
    tokens = sum(sum(r.response_mask) for r in rows)
    for lp, old, row in zip(log_probs, old_log_probs, rows, strict=True):
        adv = torch.tensor(row.advantages)
        mask = torch.tensor(row.response_mask, dtype=torch.float32)
        ratio = torch.exp(torch.clamp(lp - old, -20.0, 20.0))
        loss1 = -adv * ratio
        loss2 = -adv * torch.clamp(ratio, 1 - clip_ratio, 1 + clip_ratio)
        loss = torch.maximum(loss1, loss2)
        fractions.append(float(((loss2 > loss1).float() * mask).sum()) / max(1.0, float(mask.sum())))
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * clip_ratio_c), loss)
        total = total + (loss * mask).sum()
    return total / tokens, fractions
