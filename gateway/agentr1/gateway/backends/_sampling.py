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
    """Sample one token per row of ``logits`` ([batch, vocab])."""
    logits = logits.float()
    temperatures = [1.0 if is_greedy(p) else float(p.temperature) for p in params]
    if all(t == 1.0 for t in temperatures):
        scaled = logits
    else:
        scaled = logits / torch.tensor(temperatures, dtype=logits.dtype, device=logits.device)[:, None]
    log_norm = torch.logsumexp(scaled, dim=-1)
    greedy_ids = scaled.argmax(dim=-1)
    token_ids: list[int] = []
    for row, (p, generator) in enumerate(zip(params, generators, strict=True)):
        if is_greedy(p):
            token_ids.append(int(greedy_ids[row]))
        else:
            token_ids.append(_sample_row(scaled[row], p, generator))
    chosen = torch.tensor(token_ids, device=logits.device)
    logprobs = (scaled.gather(1, chosen[:, None]).squeeze(1) - log_norm).tolist()
    out: list[Sampled] = []
    for row, p in enumerate(params):
        top = None
        if p.top_logprobs > 0:
            values, ids = scaled[row].topk(min(p.top_logprobs, scaled.shape[-1]))
            top = [
                TokenLogprob(int(i), float(v))
                for i, v in zip(ids.tolist(), (values - log_norm[row]).tolist(), strict=True)
            ]
        out.append(Sampled(token_ids[row], float(logprobs[row]), top))
    return out


def _sample_row(scaled: torch.Tensor, p: SamplingParams, generator: torch.Generator | None) -> int:
    vocab = scaled.shape[-1]
    if 0 < p.top_k < vocab:
        values, ids = scaled.topk(p.top_k)  # sorted, largest first
    elif p.top_p < 1.0:
        values, ids = scaled.sort(descending=True)
    else:
        probs = torch.softmax(scaled, dim=-1)
        return int(torch.multinomial(probs, 1, generator=generator))
    probs = torch.softmax(values, dim=-1)
    if p.top_p < 1.0:
        # keep the smallest prefix whose mass reaches top_p (at least one token)
        before = probs.cumsum(-1) - probs
        keep = max(1, int((before < p.top_p).sum()))
        probs = probs[:keep]
    choice = int(torch.multinomial(probs, 1, generator=generator))
    return int(ids[choice])
