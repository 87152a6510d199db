"""Batched next-token sampling with log-probabilities, on the device, for the local engine.

Each row of a batch has its own temperature, top-p, top-k and random key, so a request samples the
same tokens whether it runs alone or batched with others (up to float noise in the logits). The
reported log-probability is ``log_softmax(logits / temperature)[token]`` in float32, before
top-k/top-p truncation (temperature 0 = greedy: the logits as they are) — the quantity a trainer
recomputes. A row under a grammar (``allowed``, from :func:`.grammar.grammar_mask`) samples from its
scaled logits with the disallowed tokens set to ``-inf``: its log-probability and top alternatives are
those of that masked, renormalised distribution (vLLM's ``processed_logprobs``), the one it was drawn
from; the other rows are computed exactly as without it.

Randomness is counter-based: a row samples by inverse CDF with one uniform number per step, a
hash of (the row's 64-bit key, its output position). A row's draws therefore depend only on its
seed and on how many tokens it has sampled, never on the batch it shares or on a generator's
state, and the batch samples in a few passes over the logits (no noise over the vocabulary).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentr1.core.generation import SamplingParams, TokenLogprob

__all__ = [
    "GREEDY_BELOW",
    "HostCopy",
    "Sampled",
    "SamplingBatch",
    "is_greedy",
    "logsumexp_rows",
    "make_generator",
    "row_key",
    "sample_batch",
    "sample_next",
    "to_device",
    "to_host",
]

GREEDY_BELOW = 1e-5  # temperatures below this decode greedily
_MINUS_INF = float("-inf")


def is_greedy(params: SamplingParams) -> bool:
    return params.temperature < GREEDY_BELOW


def row_key(params: SamplingParams) -> int:
    """The row's 64-bit random key: its seed when the request has one, fresh entropy otherwise."""
    if params.seed is None:
        return secrets.randbits(64)
    return int(params.seed) & 0xFFFF_FFFF_FFFF_FFFF


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """A generator of the row's own (for :func:`sample_next`): seeded when the request has a seed."""
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


class SamplingBatch:
    """The per-row sampling parameters of a batch as device tensors (built once per batch shape, without waiting
    for the device's queue). A row whose parameters are None only pads the batch: nothing is computed for it,
    and it gets token 0."""

    def __init__(self, params: Sequence[SamplingParams | None], keys: Sequence[int], device: torch.device) -> None:
        self.size = len(params)
        drawing = {i: p for i, p in enumerate(params) if p is not None and not is_greedy(p)}
        sampled = list(drawing)
        self.temperature = to_device([float(drawing[i].temperature) if i in drawing else 1.0
                                      for i in range(self.size)], torch.float32, device)
        self.scaled = any(p.temperature != 1.0 for p in drawing.values())
        greedy_rows = [i for i, p in enumerate(params) if p is not None and i not in drawing]
        self.greedy_rows = to_device(greedy_rows, torch.long, device) if greedy_rows else None
        self.all_greedy = len(greedy_rows) == self.size
        self.sampled_rows = to_device(sampled, torch.long, device) if sampled else None
        self.all_sampled = len(sampled) == self.size  # then the rows are used in place, not gathered
        self.rows, self.n_sampled, self.keys = sampled, len(sampled), list(keys)
        truncated = [j for j, i in enumerate(sampled) if params[i].top_p < 1.0 or params[i].top_k > 0]
        self.truncated = to_device(truncated, torch.long, device) if truncated else None
        self.top_p = to_device([float(params[sampled[j]].top_p) for j in truncated], torch.float32, device)
        top_k = [int(params[sampled[j]].top_k) for j in truncated]
        self.top_k = to_device(top_k, torch.long, device)
        # top-k alone (no top-p below 1) needs only the k best entries instead of a full sort
        self.top_k_only = bool(truncated) and all(
            k > 0 and params[sampled[j]].top_p >= 1.0 for j, k in zip(truncated, top_k, strict=True)
        )
        self.max_top_k = max(top_k, default=0)
        self.top_logprobs = [int(p.top_logprobs) if p is not None else 0 for p in params]
        self.max_top_logprobs = max(self.top_logprobs, default=0)


def _mix64(key: int, step: int) -> int:
    """splitmix64 of (key, step): the random bits of one row's draw at one output position."""
    x = (key + (step + 1) * 0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_FFFF_FFFF
    x = ((x ^ (x >> 30)) * 0xBF58_476D_1CE4_E5B9) & 0xFFFF_FFFF_FFFF_FFFF
    x = ((x ^ (x >> 27)) * 0x94D0_49BB_1331_11EB) & 0xFFFF_FFFF_FFFF_FFFF
    return x ^ (x >> 31)


def _uniforms(batch: SamplingBatch, steps: list[int], device: torch.device) -> torch.Tensor:
    """One uniform number in (0, 1) per sampled row, a function of (row key, output position)."""
    values = [((_mix64(batch.keys[i], steps[i]) >> 40) + 0.5) / (1 << 24) for i in batch.rows]
    return to_device(values, torch.float32, device)


def _truncate(x: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """Mask (to -inf) the tokens top-k then top-p drop, for the rows in ``batch.truncated``."""
    assert batch.truncated is not None
    rows = x.index_select(0, batch.truncated)
    vocab = rows.shape[-1]
    if batch.top_k_only and batch.max_top_k < vocab:
        values, ids = rows.topk(batch.max_top_k, dim=-1)
    else:
        values, ids = rows.sort(dim=-1, descending=True)
    ranks = torch.arange(values.shape[-1], device=x.device)
    k = torch.where(batch.top_k > 0, batch.top_k, vocab)
    keep = ranks[None, :] < k[:, None]
    # top-p over the top-k survivors: the smallest prefix whose mass reaches top_p (at least one token)
    probs = torch.softmax(values.masked_fill(~keep, float("-inf")), dim=-1)
    keep = keep & ((probs.cumsum(-1) - probs) < batch.top_p[:, None])
    keep[:, 0] = True
    allowed = torch.zeros_like(rows, dtype=torch.bool).scatter_(1, ids, keep)
    return x.index_copy(0, batch.truncated, rows.masked_fill(~allowed, float("-inf")))


@dataclass(slots=True)
class SampledBatch:
    """Device tensors: ``token_ids`` [B], ``logprobs`` [B] and, when asked, the top log-probs [B, k]."""

    token_ids: torch.Tensor
    logprobs: torch.Tensor
    top_ids: torch.Tensor | None = None
    top_logprobs: torch.Tensor | None = None


def logsumexp_rows(x: torch.Tensor) -> torch.Tensor:
    """``torch.logsumexp`` of each row of ``x`` ([rows, vocab]), with the same bits for a row whatever the rows
    beside it and the thread count: on the CPU the sum of a lone row is split among the threads (its last bits then
    change with their number: 1 vs 2 threads, SmolLM2's logits), while each of several rows is summed by
    one thread; so a lone row is summed beside a copy of itself."""
    if x.shape[0] == 1 and x.device.type == "cpu":
        return torch.logsumexp(x.expand(2, -1).contiguous(), dim=-1)[:1]
    return torch.logsumexp(x, dim=-1)


def sample_batch(logits: torch.Tensor, batch: SamplingBatch, steps: list[int],
                 allowed: tuple[torch.Tensor, torch.Tensor] | None = None) -> SampledBatch:
    """Sample one token per row of ``logits`` ([B, vocab]); ``steps[i]`` is row i's output position;
    ``allowed``: (row indices, bool mask [n, vocab]) of the rows constrained by a grammar.

    Sampled rows draw by inverse CDF: the first token whose cumulative ``softmax(x)`` (``x``: the
    truncated scaled logits) exceeds the row's uniform number. Nothing here waits on the device."""
    logits = logits.float()
    scaled = logits / batch.temperature[:, None] if batch.scaled else logits
    if allowed is not None:  # out of place: ``logits`` may be a CUDA graph's output buffer
        rows, mask = allowed
        scaled = scaled.index_copy(0, rows, scaled.index_select(0, rows).masked_fill(~mask, float("-inf")))
    log_norm = logsumexp_rows(scaled)
    if batch.all_greedy:
        chosen = scaled.argmax(dim=-1)
    else:  # padding rows keep token 0
        chosen = torch.zeros(batch.size, dtype=torch.long, device=scaled.device)
        if batch.greedy_rows is not None:
            chosen = chosen.index_copy(0, batch.greedy_rows, scaled.index_select(0, batch.greedy_rows).argmax(dim=-1))
    if batch.sampled_rows is not None:
        x = scaled if batch.all_sampled else scaled.index_select(0, batch.sampled_rows)
        if batch.truncated is not None:
            x = _truncate(x, batch)  # out of place
            norm = logsumexp_rows(x)
        else:
            norm = log_norm if batch.all_sampled else log_norm[batch.sampled_rows]
        cdf = torch.exp_(x - norm[:, None]).cumsum_(dim=-1)  # inverse-CDF sampling: one uniform per row
        target = (_uniforms(batch, steps, x.device) * cdf[:, -1])[:, None]
        drawn = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_max_(x.shape[-1] - 1)
        chosen = drawn if batch.all_sampled else chosen.index_copy(0, batch.sampled_rows, drawn)
    logprobs = scaled.gather(1, chosen[:, None]).squeeze(1) - log_norm
    out = SampledBatch(chosen, logprobs)
    if batch.max_top_logprobs:
        values, ids = scaled.topk(min(batch.max_top_logprobs, scaled.shape[-1]), dim=-1)
        out.top_ids, out.top_logprobs = ids, values - log_norm[:, None]
    return out


class HostCopy:
    """A batch's sampled ids, log-probabilities and top alternatives on their way to the host: one transfer,
    started without waiting (into pinned memory on a GPU, so that the host can queue the next step meanwhile)
    and read by :meth:`wait`. ``token_ids`` stays on the device (the next decode step's input ids)."""

    def __init__(self, sampled: SampledBatch, batch: SamplingBatch) -> None:
        self.token_ids = sampled.token_ids
        self._batch = batch
        parts = [sampled.token_ids.double()[:, None], sampled.logprobs.double()[:, None]]
        if sampled.top_ids is not None and sampled.top_logprobs is not None:
            parts += [sampled.top_ids.double(), sampled.top_logprobs.double()]
        table = torch.cat(parts, dim=1)
        self._event: torch.cuda.Event | None = None
        if table.is_cuda:
            self._table = torch.empty(table.shape, dtype=table.dtype, pin_memory=True)
            self._table.copy_(table, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._table = table

    def wait(self) -> list[Sampled]:
        """Wait for the transfer; one :class:`Sampled` per row of the batch."""
        if self._event is not None:
            self._event.synchronize()
        k = self._batch.max_top_logprobs
        out = []
        for row, wanted in zip(self._table.tolist(), self._batch.top_logprobs, strict=True):
            top = None
            if wanted:
                top = [TokenLogprob(int(t), float(v)) for t, v in zip(row[2 : 2 + wanted], row[2 + k : 2 + k + wanted],
                                                                      strict=True)
                       if v != _MINUS_INF]  # tokens a grammar ruled out
            out.append(Sampled(int(row[0]), float(row[1]), top))
        return out


def to_host(sampled: SampledBatch, batch: SamplingBatch) -> list[Sampled]:
    """One device-to-host transfer for the batch, waited for: python ids, log-probs and top alternatives."""
    return HostCopy(sampled, batch).wait()


def to_device(values: list[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list on ``device`` without waiting for the device's queue (staged through pinned memory on a GPU)."""
    if device.type != "cuda":
        return torch.tensor(values, dtype=dtype)
    return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def sample_next(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator | None]
) -> list[Sampled]:
    """Sample one token per row of ``logits`` ([batch, vocab]); each sampled row draws its key from
    its generator (rows may share one), then samples as :func:`sample_batch` at output position 0."""
    keys = []
    for p, generator in zip(params, generators, strict=True):
        if is_greedy(p) or generator is None:
            keys.append(0)
        else:
            keys.append(int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)))
    batch = SamplingBatch(params, keys, logits.device)
    return to_host(sample_batch(logits, batch, [0] * len(params)), batch)
