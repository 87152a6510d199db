"""Per-row next-token sampling with log-probabilities, for the local engine.

Each row of a batch has its own temperature, top-p, top-k and random generator, so a request
samples the same tokens whether it runs alone or batched with others (up to float noise in the
logits). The reported log-probability is ``log_softmax(logits / temperature)[token]`` in float32,
before top-k/top-p truncation (temperature 0 = greedy: the logits as they are) — the quantity a
trainer recomputes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .base import SamplingParams, TokenLogprob

GREEDY_BELOW = 1e-5  # temperatures below this decode greedily


def is_greedy(params: SamplingParams) -> bool:
    return params.temperature < GREEDY_BELOW


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """A generator of the row's own: seeded when the request has a seed, random otherwise."""
    if is_greedy(params):
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(params.seed) & 0xFFFF_FFFF_FFFF_FFFF)
    return generator


@dataclass(slots=True)
class Sampled:
    token_id: int
    logprob: float
    top: list[TokenLogprob] | None


def sample_next(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator | None]
) -> list[Sampled]:
    """Sample one token per row of ``logits`` ([batch, vocab]).

    Sampled rows use the Gumbel-max trick: ``argmax(x + Gumbel noise)`` over the truncated scaled
    logits ``x`` draws from ``softmax(x)``. Each row draws its noise from its own generator, and
    nothing waits on the device until the chosen ids are read, once per step."""
    logits = logits.float()
    batch, vocab = logits.shape
    device = logits.device
    temperatures = [1.0 if is_greedy(p) else float(p.temperature) for p in params]
    if all(t == 1.0 for t in temperatures):
        scaled = logits
    else:
        scaled = logits / torch.tensor(temperatures, dtype=logits.dtype, device=device)[:, None]
    log_norm = torch.logsumexp(scaled, dim=-1)
    chosen = scaled.argmax(dim=-1)
    rows = [i for i, p in enumerate(params) if not is_greedy(p)]
    if rows:
        index = torch.tensor(rows, device=device)
        x = scaled.index_select(0, index)
        for j, i in enumerate(rows):
            keep = _truncation(x[j], params[i])
            if keep is not None:
                x[j] = x[j].masked_fill(~keep, float("-inf"))
        uniform = torch.stack([torch.rand(vocab, generator=generators[i], device=device) for i in rows])
        gumbel = -torch.log(-torch.log(uniform.clamp_min(torch.finfo(uniform.dtype).tiny)))
        noisy = torch.where(torch.isneginf(x), x, x + gumbel)
        chosen = chosen.index_put((index,), noisy.argmax(dim=-1))
    logprobs = (scaled.gather(1, chosen[:, None]).squeeze(1) - log_norm).tolist()
    token_ids = chosen.tolist()
    tops: list[list[TokenLogprob] | None] = [None] * batch
    wanted = [i for i, p in enumerate(params) if p.top_logprobs > 0]
    if wanted:
        index = torch.tensor(wanted, device=device)
        k = min(max(params[i].top_logprobs for i in wanted), vocab)
        values, ids = scaled.index_select(0, index).topk(k, dim=-1)
        values = (values - log_norm.index_select(0, index)[:, None]).tolist()
        ids = ids.tolist()
        for j, i in enumerate(wanted):
            n = params[i].top_logprobs
            tops[i] = [TokenLogprob(int(t), float(v)) for t, v in zip(ids[j][:n], values[j][:n], strict=True)]
    return [Sampled(int(token_ids[i]), float(logprobs[i]), tops[i]) for i in range(batch)]


def _truncation(scaled: torch.Tensor, p: SamplingParams) -> torch.Tensor | None:
    """The tokens top-k then top-p keep (a bool mask over the vocabulary), or None for all."""
    vocab = scaled.shape[-1]
    if 0 < p.top_k < vocab:
        values, ids = scaled.topk(p.top_k)  # sorted, largest first
    elif p.top_p < 1.0:
        values, ids = scaled.sort(descending=True)
    else:
        return None
    selected = torch.ones_like(values, dtype=torch.bool)
    if p.top_p < 1.0:
        # the smallest prefix whose mass reaches top_p (at least one token)
        probs = torch.softmax(values, dim=-1)
        selected = (probs.cumsum(-1) - probs) < p.top_p
        selected[0] = True
    return torch.zeros(vocab, dtype=torch.bool, device=scaled.device).scatter(0, ids, selected)
