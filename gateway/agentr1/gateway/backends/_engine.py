"""The batch the local engine decodes: continuous batching over a HF causal LM with a KV cache.

Runs on the engine's worker thread only. Rows share one left-padded KV cache
([batch, heads, time, dim] per layer) and a 2-D attention mask; every row has its own position
ids, sampling parameters and random generator. New requests are prefilled together as their own
left-padded batch and then joined to the running batch at a step boundary (both caches are
left-padded to a common length and concatenated); finished rows leave the batch at once and their
results are delivered right away. Leading columns that no row uses any more are trimmed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from ._sampling import Sampled, make_generator, sample_next
from .base import BackendError, FinishReason, GenerateResult, SamplingParams, TokenLogprob

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where a row's tokens go (the asyncio side); called from the worker thread."""

    def delta(self, token_ids: list[int], logprobs: list[float]) -> None: ...

    def result(self, result: GenerateResult, token_ids: list[int], logprobs: list[float]) -> None: ...

    def error(self, exc: BaseException) -> None: ...


@dataclass(eq=False)
class Row:
    """One request in flight."""

    prompt_ids: list[int]
    sampling: SamplingParams
    sink: Sink
    request_id: str = ""
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[TokenLogprob]] | None = None
    streamed: int = 0  # tokens already handed to the sink as deltas
    cancelled: bool = False  # set from the asyncio side when the caller went away
    finish_reason: FinishReason | None = None
    matched_stop: str | int | None = None

    def __post_init__(self) -> None:
        if self.sampling.top_logprobs > 0:
            self.top_logprobs = []

    @property
    def stop_window(self) -> int:
        """Tokens to decode to see every stop string that ends at the newest token."""
        longest = max((len(s.encode()) for s in self.sampling.stop), default=0)
        return longest + 2


@dataclass
class EngineStats:
    """Counters of the worker; tests and /metrics read them."""

    forward_passes: int = 0
    prefill_passes: int = 0
    decode_steps: int = 0
    max_batch_rows: int = 0
    requests_finished: int = 0
    requests_failed: int = 0
    tokens_generated: int = 0


class BatchEngine:
    def __init__(
        self,
        model: Any,
        *,
        eos_ids: set[int],
        pad_id: int,
        decode: Any,
        max_context: int,
        stats: EngineStats,
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.eos_ids = eos_ids
        self.pad_id = pad_id
        self.decode_text = decode  # ids -> text, special tokens kept
        self.max_context = max_context
        self.stats = stats
        self.policy_version = 0
        self.rows: list[Row] = []
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [rows, time] 1 = real token

    # -- the two kinds of step ------------------------------------------------------------

    def prefill(self, rows: list[Row]) -> None:
        """Prefill new rows as one batch, sample their first token, join the running batch."""
        rows = [r for r in rows if not r.cancelled]
        if not rows:
            return
        try:
            for row in rows:
                row.generator = make_generator(row.sampling, self.device)
            width = max(len(r.prompt_ids) for r in rows)
            ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids, dtype=torch.long)
                mask[i, width - len(row.prompt_ids) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            ids, mask, positions = ids.to(self.device), mask.to(self.device), positions.to(self.device)
            cache = DynamicCache()
            logits = self._forward(ids, mask, positions, cache)
            self.stats.prefill_passes += 1
            self._append(rows, sample_next(logits, [r.sampling for r in rows], [r.generator for r in rows]))
        except Exception as exc:  # the running batch is untouched: only the newcomers fail
            log.exception("local engine: prefill of %d request(s) failed", len(rows))
            self._fail(rows, exc)
            return
        keep = [i for i, r in enumerate(rows) if r.finish_reason is None]
        self._finish_done(rows)
        if keep:
            self._join([rows[i] for i in keep], _select(cache, keep), mask[keep])

    def decode(self) -> None:
        """One decode step for every running row."""
        self._drop([i for i, r in enumerate(self.rows) if r.cancelled])
        if not self.rows:
            return
        rows = self.rows
        try:
            ids = torch.tensor([[r.output_ids[-1]] for r in rows], dtype=torch.long, device=self.device)
            positions = torch.tensor(
                [[len(r.prompt_ids) + len(r.output_ids) - 1] for r in rows], dtype=torch.long, device=self.device
            )
            assert self.mask is not None and self.cache is not None
            mask = torch.cat([self.mask, self.mask.new_ones((len(rows), 1))], dim=1)
            logits = self._forward(ids, mask, positions, self.cache)
            self.mask = mask
            self.stats.decode_steps += 1
            self._append(rows, sample_next(logits, [r.sampling for r in rows], [r.generator for r in rows]))
        except Exception as exc:  # the cache may be half-updated: fail and reset the whole batch
            log.exception("local engine: decode step of %d request(s) failed", len(rows))
            self._fail(rows, exc)
            self.reset()
            return
        self._finish_done(rows)
        self._drop([i for i, r in enumerate(rows) if r.finish_reason is not None])

    # -- shutdown / failure ---------------------------------------------------------------

    def abort_all(self) -> None:
        """Finish every running row with ``finish_reason="abort"`` and what it has sampled so far."""
        for row in self.rows:
            row.finish_reason = "abort"
        self._finish_done(self.rows)
        self.reset()

    def reset(self) -> None:
        self.rows, self.cache, self.mask = [], None, None

    # -- internals ------------------------------------------------------------------------

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.stats.forward_passes += 1
        self.stats.max_batch_rows = max(self.stats.max_batch_rows, ids.shape[0])
        return out.logits[:, -1, :]

    def _append(self, rows: list[Row], sampled: list[Sampled]) -> None:
        for row, s in zip(rows, sampled, strict=True):
            row.output_ids.append(s.token_id)
            row.logprobs.append(s.logprob)
            if row.top_logprobs is not None and s.top is not None:
                row.top_logprobs.append(s.top)
            self.stats.tokens_generated += 1
            self._check_stop(row)
            if row.finish_reason is None and len(row.output_ids) > row.streamed:
                row.sink.delta(row.output_ids[row.streamed :], row.logprobs[row.streamed :])
                row.streamed = len(row.output_ids)

    def _check_stop(self, row: Row) -> None:
        token = row.output_ids[-1]
        p = row.sampling
        if token in self.eos_ids or token in p.stop_token_ids:
            row.finish_reason, row.matched_stop = "stop", token
            return
        if p.stop:
            text = self.decode_text(row.output_ids[-row.stop_window :])
            for stop in p.stop:
                if stop and stop in text:
                    row.finish_reason, row.matched_stop = "stop", stop
                    return
        if len(row.output_ids) >= p.max_new_tokens:
            row.finish_reason = "length"
        elif len(row.prompt_ids) + len(row.output_ids) >= self.max_context:
            row.finish_reason = "length"

    def _finish_done(self, rows: list[Row]) -> None:
        for row in rows:
            if row.finish_reason is None:
                continue
            self.stats.requests_finished += 1
            result = GenerateResult(
                output_ids=list(row.output_ids),
                logprobs=list(row.logprobs),
                finish_reason=row.finish_reason,
                prompt_tokens=len(row.prompt_ids),
                policy_version=self.policy_version,
                matched_stop=row.matched_stop,
                top_logprobs=row.top_logprobs,
            )
            new_ids, new_lps = row.output_ids[row.streamed :], row.logprobs[row.streamed :]
            row.streamed = len(row.output_ids)
            row.sink.result(result, new_ids, new_lps)

    def _fail(self, rows: list[Row], exc: Exception) -> None:
        for row in rows:
            self.stats.requests_failed += 1
            error = BackendError(f"local engine failed during generation: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            row.sink.error(error)

    def _join(self, rows: list[Row], cache: DynamicCache, mask: torch.Tensor) -> None:
        if not self.rows:
            self.rows, self.cache, self.mask = list(rows), cache, mask
            return
        assert self.cache is not None and self.mask is not None
        width = max(self.mask.shape[1], mask.shape[1])
        for old, new in zip(self.cache.layers, cache.layers, strict=True):
            old.keys = torch.cat([_pad_time(old.keys, width), _pad_time(new.keys, width)], dim=0)
            old.values = torch.cat([_pad_time(old.values, width), _pad_time(new.values, width)], dim=0)
        self.mask = torch.cat([_pad_mask(self.mask, width), _pad_mask(mask, width)], dim=0)
        self.rows.extend(rows)

    def _drop(self, indices: list[int]) -> None:
        """Remove rows from the running batch; trim time columns no remaining row uses."""
        if not indices:
            return
        gone = set(indices)
        keep = [i for i in range(len(self.rows)) if i not in gone]
        if not keep:
            self.reset()
            return
        assert self.cache is not None and self.mask is not None
        self.rows = [self.rows[i] for i in keep]
        self.cache = _select(self.cache, keep)
        self.mask = self.mask[keep]
        used = self.mask.any(dim=0).nonzero()
        start = int(used[0]) if len(used) else 0
        if start > 0:
            self.mask = self.mask[:, start:]
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, start:, :]
                layer.values = layer.values[:, :, start:, :]


def end_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end generation: the model's eos ids, the tokenizer's eos and ``<|im_end|>``."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def pad_token_id(tokenizer: Any) -> int:
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return 0


def _select(cache: DynamicCache, keep: list[int]) -> DynamicCache:
    index = torch.tensor(keep, dtype=torch.long)
    for layer in cache.layers:
        if layer.keys is not None and layer.keys.shape[0] != len(keep):
            layer.keys = layer.keys.index_select(0, index.to(layer.keys.device))
            layer.values = layer.values.index_select(0, index.to(layer.values.device))
    return cache


def _pad_time(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pad a [batch, heads, time, dim] tensor with zeros to ``width`` time steps."""
    missing = width - tensor.shape[2]
    return F.pad(tensor, (0, 0, missing, 0)) if missing else tensor


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - mask.shape[1]
    return F.pad(mask, (missing, 0)) if missing else mask
