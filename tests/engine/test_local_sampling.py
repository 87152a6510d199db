"""The local engine's sampler: distributions, truncation, log-probabilities, per-row determinism."""

from __future__ import annotations

import pytest
import torch

from agentr1.core.generation import SamplingParams
from agentr1.engine.sampling import make_generator, sample_next

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
DRAWS = 10_000


def frequencies(params: SamplingParams, draws: int = DRAWS) -> torch.Tensor:
    """Empirical token frequencies of ``draws`` rows sharing one seeded generator (deterministic)."""
    generator = make_generator(SamplingParams(seed=0), torch.device("cpu"))
    sampled = sample_next(LOGITS.expand(draws, -1).clone(), [params] * draws, [generator] * draws)
    return torch.bincount(torch.tensor([s.token_id for s in sampled]), minlength=len(LOGITS)).float() / draws


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_samples_follow_softmax_of_scaled_logits(temperature):
    expected = torch.softmax(LOGITS / temperature, dim=-1)
    assert frequencies(SamplingParams(temperature=temperature)) == pytest.approx(expected.tolist(), abs=0.02)


def test_top_k_and_top_p_renormalise_over_the_kept_tokens():
    probs = torch.softmax(LOGITS, dim=-1)
    top2 = (probs[:2] / probs[:2].sum()).tolist()
    assert frequencies(SamplingParams(top_k=2), 3000) == pytest.approx([*top2, 0, 0, 0], abs=0.03)
    # mass before token 1 is 0.56 < 0.7 (kept), before token 2 it is 0.77 (dropped)
    assert frequencies(SamplingParams(top_p=0.7), 3000) == pytest.approx([*top2, 0, 0, 0], abs=0.03)
    top3 = (probs[:3] / probs[:3].sum()).tolist()
    assert frequencies(SamplingParams(top_k=3, top_p=0.99), 3000) == pytest.approx([*top3, 0, 0], abs=0.03)
    assert frequencies(SamplingParams(top_p=0.01), 200).tolist() == [1.0, 0, 0, 0, 0]


def test_logprobs_are_of_the_untruncated_scaled_distribution_and_rows_are_independent():
    logits = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0)) * 3
    params = [
        SamplingParams(temperature=0.0, top_logprobs=2),
        SamplingParams(temperature=0.7, top_p=0.8, seed=1),
        SamplingParams(temperature=1.5, top_k=5, seed=2, top_logprobs=3),
        SamplingParams(temperature=1.0, seed=3),
    ]
    batch = sample_next(logits, params, [make_generator(p, torch.device("cpu")) for p in params])
    for row, (p, s) in enumerate(zip(params, batch, strict=True)):
        t = p.temperature if p.temperature > 0 else 1.0
        logp = torch.log_softmax(logits[row] / t, dim=-1)
        assert s.logprob == pytest.approx(float(logp[s.token_id]), abs=1e-5)
        alone = sample_next(logits[row : row + 1], [p], [make_generator(p, torch.device("cpu"))])[0]
        assert (alone.token_id, alone.logprob) == (s.token_id, s.logprob)  # same draw alone or batched
        if p.top_k:
            assert s.token_id in logits[row].topk(p.top_k).indices.tolist()
    assert batch[0].token_id == int(logits[0].argmax())
    assert [t.token_id for t in batch[0].top] == logits[0].topk(2).indices.tolist()
    assert [t.logprob for t in batch[2].top] == pytest.approx(
        torch.log_softmax(logits[2] / 1.5, -1).topk(3).values.tolist(), abs=1e-5
    )
    assert batch[1].top is None and batch[3].top is None
