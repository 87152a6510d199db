"""verl's sft_loss through the policy: the NLL of action tokens only, and it goes down."""

from __future__ import annotations

import itertools

import pytest
import torch
from policy_fixtures import load_plain_model, make_row, plain_logprobs

from agentr1.trainer.policy import LocalPolicy


@pytest.mark.slow
def test_sft_update_is_the_action_token_nll_and_decreases(tiny_model_path):
    rows = [
        make_row([5, 6, 7, 8], [40, 41, 42, 43, 44, 45], mask=[1, 1, 0, 0, 1, 1]),  # feedback in the middle
        make_row([9, 10], [50, 51, 52], mask=[1, 1, 1]),
        make_row([11, 12, 13], [60, 61, 62, 63], mask=[0, 1, 1, 1]),
    ]
    plain = load_plain_model(tiny_model_path)
    with torch.no_grad():
        logprobs = plain_logprobs(plain, rows)
    masks = [torch.tensor(r.response_mask, dtype=torch.float32) for r in rows]
    action_nll = -sum(float((lp * m).sum()) for lp, m in zip(logprobs, masks, strict=True)) / sum(
        float(m.sum()) for m in masks)
    all_nll = -sum(float(lp.sum()) for lp in logprobs) / sum(len(lp) for lp in logprobs)
    assert abs(action_nll - all_nll) > 1e-3  # the mask changes the value: the check below can fail

    # a token budget of one row per micro-batch: verl normalises by the whole batch's action tokens
    policy = LocalPolicy(tiny_model_path, device="cpu", lr=1e-3, ppo_max_token_len_per_gpu=10)
    first = policy.sft_update(rows)
    assert first["sft/loss"] == pytest.approx(action_nll, rel=1e-4)
    assert first["sft/action_tokens"] == 10 and first["sft/optimizer_steps"] == 1 and policy.version == 1
    losses = [first["sft/loss"]] + [policy.sft_update(rows)["sft/loss"] for _ in range(4)]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.8 * losses[0]

    with pytest.raises(ValueError, match="no action tokens"):
        policy.sft_update([make_row([1, 2], [3, 4], mask=[0, 0])])
