"""The batch the local engine decodes: continuous batching over a HF causal LM with a slot KV cache.

Runs on the engine's worker thread only. Every request owns one slot of a :class:`~.slot_cache.
SlotCache` for its whole life and keeps its tokens at their own positions there, so a decode step
is one forward of one token per slot (slots ``0..B-1``; on a GPU replayed from a CUDA graph, see
:mod:`.graphs`), sampled for all rows at once on the device (:mod:`.sampling`) with one transfer
to the host per step. New requests are prefilled between decode steps and join the running batch;
finished ones leave it at once and their results are delivered right away.

Overlap (``overlap``, on by default on a GPU): the host queues step k+1 before it reads step k's tokens, so
the device decodes while the host appends, checks stops and delivers. Step k+1 takes its input ids from step
k's sampled ids on the device and its positions from the host (a row's next position does not depend on the
token). A row that step k finishes (an end token, a stop string) is decoded once more by step k+1 and that
token is dropped; a row that step k brings to its token limit is left out of step k+1. Rows with a grammar
(whose next mask needs the token before) and anything that changes the batch's slots (a prefill, a failure)
read the step in flight first (:meth:`BatchEngine.drain`). What each row samples is unchanged: its draws
depend on its key and output position only.

Slots (:class:`~.slots.SlotTable`): which slot each running row and each cached prefix holds. Prefix reuse:
prompts are prefilled in chunks aligned to multiples of :data:`CHUNK` positions, and
the full chunks of a finished request's prompt are copied to an idle slot at the top of the cache,
an entry of a :class:`~.prefix.PrefixIndex` (least recently used entries are evicted). A later
prompt that starts with those ids (the next turn of an agent session, a resample, the other
members of a group) copies them into its own slot and prefills from the first chunk it does not
share; ``GenerateResult.cached_tokens`` says how many prompt tokens came from the cache. Rows admitted
together share too: segments of one prefill forward with the same positions of the same prompt ids (a
common system prompt and tool schemas, the identical prompts of a group) are computed once, by the
first of them, whose keys and values (and last logits) are then copied to the others, counted as cached.

In ``exact`` mode (the default on the CPU) every prefill forward is one chunk of :data:`CHUNK`
queries per row over exactly the positions up to the chunk's end, grouped by chunk, so a chunk's
keys and values are the same bits however the prompt reached it: with and without reuse the
sampled ids and log-probabilities are identical (the forwards are planned up front, ``prefill_plan.py``; on the CPU a
Llama-family admission runs its planned forwards together, layer by layer, over its real tokens only, each chunk's
attention in its own forward's shape: ``flat_forward.py``). On a GPU (``exact=False``) longer segments are
prefilled per forward and reuse is exact up to float rounding. Keys and values of decoded tokens
are not reused: the next turn prefills them again (once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from agentr1.core.generation import BackendError, GenerateResult

from .flat_forward import flat_forward_for
from .grammar import grammar_mask
from .graphs import LENGTH_STEP, DecodeGraphs, row_bucket
from .images import image_token_id, prompt_embeds, segment_inputs
from .options import EngineOptions
from .prefill_plan import (
    PlannedForward,
    flat_layout,
    forward_shape,
    padded_segments,
    passes,
    plan_forwards,
    shared_columns,
)
from .prefix import Segment
from .prompt_logprobs import prompt_logprobs
from .rows import EngineStats, Row
from .sampling import HostCopy, Sampled, SamplingBatch, row_key, sample_batch, to_device, to_host
from .slot_cache import SlotCache, attention_kernels
from .slots import SlotTable, round_up

__all__ = ["BatchEngine"]

log = logging.getLogger(__name__)

CPU_LENGTH_STEP = 64
# with ``batch_invariant``, a CPU decode step runs at least this many rows (a padding row beside a lone one): oneDNN
# multiplies one row in another order than two or more (SmolLM2's down projection), so a row decoded alone gets other
# bits than in company, and a greedy evaluation's tokens would depend on which episodes were still running
# (packed_linear.py). Its price: 21.7 -> 24.1 CPU ms a token in bfloat16, 31.9 -> 35.7 in float32, for a lone row
# (SmolLM2, one thread, 2-core AMD EPYC VM)
CPU_MIN_ROWS = 2


@dataclass(slots=True)
class _Step:
    """A decode step launched and not yet read: the rows it decodes and its tokens on their way to the host."""

    rows: list[Row]
    copy: HostCopy


class BatchEngine:
    """The running batch of ``model`` under ``options`` (:class:`~.options.EngineOptions`: the batch size, the
    prefix cache and its bound, exact prefills, CUDA graphs, compilation, the prefill budget, overlap; the
    device and dtype are the model's) with ``max_context`` positions a row."""

    def __init__(
        self,
        model: Any,
        options: EngineOptions,
        *,
        eos_ids: set[int],
        pad_id: int,
        decode: Any,
        max_context: int,
        stats: EngineStats,
    ) -> None:
        self.model = model
        self.image_id = image_token_id(model)  # a vision-language model's image placeholder (None: text only)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        gpu = self.device.type == "cuda"
        self.eos_ids = eos_ids
        self.pad_id = pad_id
        self.decode_text = decode  # ids -> text, special tokens kept
        self.max_context = max_context
        self.stats = stats
        self.policy_version = 0
        self.max_batch_size = options.max_batch_size
        self.prefix_cache = options.prefix_cache
        self.exact = (not gpu) if options.exact is None else options.exact
        self.overlap = gpu if options.overlap is None else options.overlap  # on a CPU every op waits anyway
        self.prefill_budget = options.prefill_budget or (16384 if gpu else 1024)
        self.length_step = LENGTH_STEP if gpu else CPU_LENGTH_STEP
        self.min_rows = CPU_MIN_ROWS if options.batch_invariant and not gpu else 1
        self.cache = SlotCache(model.config, self.device, self.dtype)
        cache_bytes = options.cache_bound()
        if cache_bytes is None:
            cache_bytes = (torch.cuda.mem_get_info(self.device)[0] // 4) if gpu else 1 << 30
        self.slot_table = SlotTable(self.cache, max_slots=2 * self.max_batch_size, cache_bytes=cache_bytes,
                                    max_context=max_context, prefix_cache=self.prefix_cache, image_id=self.image_id)
        self.rows: list[Row] = []
        self._decode_step = self._decode_forward
        if options.compile:  # inductor fuses the step's small kernels; rows and attended length stay symbolic, so
            # it compiles twice (one row, which torch specialises, and any other count), not once per shape
            self._decode_step = torch.compile(self._decode_forward, dynamic=True)
        self._graphs = DecodeGraphs(self._decode_step, self._safe_inputs) if gpu and options.cuda_graphs else None
        # on the CPU a Llama-family step or text prefill runs as one flat function of the same operations (flat_forward.py)
        self._flat = (flat_forward_for(model, pair_lone_rows=options.batch_invariant)
                      if not gpu and options.flat_forward and not options.compile else None)
        self._sampling: tuple[tuple[int, ...], SamplingBatch] | None = None
        self._in_flight: _Step | None = None
        self._ids = self._pos = self._slot_ids = self._cols = torch.zeros(0, dtype=torch.long)

    @property
    def cache_bytes(self) -> int:
        """The KV cache's bound in bytes (running rows and cached prefixes)."""
        return self.slot_table.cache_bytes

    # -- the two kinds of step ------------------------------------------------------------

    def prefill(self, rows: list[Row]) -> None:
        """Prefill new rows (reusing cached prefixes), sample their first token, join the batch."""
        started = time.perf_counter()
        with attention_kernels(self.device):
            self._prefill(rows)
        self.stats.prefill_s += time.perf_counter() - started

    def decode(self) -> None:
        """One decode step for every running row."""
        with attention_kernels(self.device):
            self._decode()

    def _prefill(self, rows: list[Row]) -> None:
        self.drain()  # newcomers take slots and may re-pack the cache
        rows = [r for r in rows if not r.cancelled]
        if not rows:
            return
        try:
            if self.slot_table.reserve(self.rows, rows):
                self._new_buffers()
            for row in rows:
                row.key = row_key(row.sampling)
                self.slot_table.claim(row)
                if row.multimodal is not None:  # images: the prompt is fed as embeddings with their features
                    row.embeds = prompt_embeds(self.model, row.prompt_ids, row.multimodal, self.image_id)
                if row.prompt_logprobs:  # echo with logprobs: one forward of its own over the whole prompt
                    row.prompt_scores = prompt_logprobs(self.model, row.prompt_ids, row.sampling)
                    row.sink.prompt(*row.prompt_scores)
            self._run_prefill(rows)
            for row in rows:
                row.embeds = None
        except Exception as exc:  # the running batch is untouched: only the newcomers fail
            log.exception("local engine: prefill of %d request(s) failed", len(rows))
            for row in rows:
                self.slot_table.release(row, keep=False)
            self._fail(rows, exc)
            return
        self.rows.extend(rows)
        self._sampling = None
        self._retire([r for r in rows if r.finish_reason is not None])

    def _decode(self) -> None:
        self._retire([r for r in self.rows if r.cancelled], keep=False, deliver=False)
        # a grammar's mask for the next token needs the tokens before it: such steps are read before the next
        in_step = not self.overlap or any(r.grammar is not None for r in self.rows)
        outgrown = self._outgrows_cache()
        if in_step or outgrown:
            self.drain()
        if outgrown and self._outgrows_cache() and self.slot_table.reserve(self.rows, []):  # reserved as they go
            self._new_buffers()
        # a row whose step in flight brings it to its token limit needs no further step
        rows = [r for r in self.rows if not (r.in_flight and self._reaches_limit(r))]
        if not rows:
            self.drain()
            return
        try:
            step = self._launch(rows)
        except Exception as exc:
            self._fail_batch(exc)
            return
        previous, self._in_flight = self._in_flight, step
        if previous is not None:
            self._read(previous)
        if in_step:
            self.drain()
        elif self._in_flight is not None and all(r.finish_reason is not None or r.cancelled for r in step.rows):
            self._in_flight = None  # every row it decodes has finished meanwhile: nothing to read

    def _fail_batch(self, exc: Exception) -> None:
        """A decode step failed: the cache may be half-updated, so every running row fails and the batch resets."""
        log.exception("local engine: decode step of %d request(s) failed", len(self.rows))
        self._fail(self.rows, exc)
        self.reset()

    def drain(self) -> None:
        """Read the decode step in flight, if any (before anything that changes the batch or the cache's slots)."""
        step, self._in_flight = self._in_flight, None
        if step is not None:
            self._read(step)

    def _outgrows_cache(self) -> bool:
        """Whether the next decode step would write a row's token at or past the cache's scratch column."""
        return any(len(r.prompt_ids) + len(r.output_ids) + r.in_flight > self.cache.scratch for r in self.rows)

    def _reaches_limit(self, row: Row) -> bool:
        """Whether ``row`` has its last token once its tokens in flight are read."""
        made = len(row.output_ids) + row.in_flight
        return made >= row.sampling.max_new_tokens or len(row.prompt_ids) + made >= self.max_context

    def _launch(self, rows: list[Row]) -> _Step:
        """Queue one decode step for ``rows`` (forward and sampling) and the transfer of its tokens to the host,
        without waiting for the device. With a step in flight (which decodes every row of ``rows``: rows join
        only at a prefill, which drains), the input ids are that step's sampled ids, still on the device."""
        top = max(r.slot for r in rows) + 1
        longest = max(len(r.prompt_ids) + len(r.output_ids) + r.in_flight for r in rows)
        kv_len = min(round_up(longest, self.length_step), self.cache.scratch)
        batch = self._graph_rows(top, kv_len) if self._graphs is not None else min(max(top, self.min_rows), self.cache.slots)
        ids, pos, steps = [self.pad_id] * batch, [self.cache.scratch] * batch, [0] * batch
        for r in rows:
            made = len(r.output_ids) + r.in_flight
            ids[r.slot], pos[r.slot], steps[r.slot] = r.output_ids[-1], len(r.prompt_ids) + made - 1, made
        inputs = to_device([ids, pos], torch.long, self.device)
        self._ids[:batch, 0].copy_(inputs[0])
        previous = self._in_flight
        if previous is not None:  # its sampled ids are the input (rows keep their slots between prefills)
            carried = previous.copy.token_ids[:batch]
            self._ids[: carried.shape[0], 0].copy_(carried)
        self._pos[:batch].copy_(inputs[1])
        if self._graphs is not None:
            logits = self._graphs.replay(batch, kv_len)
        else:
            logits = self._decode_step(batch, kv_len)
        self._count_forward(batch)
        self.stats.decode_steps += 1
        sampling = self._decode_sampling(batch, rows)
        allowed = grammar_mask([(r.slot, r.grammar) for r in rows], logits)  # None: no row constrained
        copy = HostCopy(sample_batch(logits, sampling, steps, allowed), sampling)
        for r in rows:
            r.in_flight += 1
        return _Step(rows, copy)

    def _graph_rows(self, top: int, kv_len: int) -> int:
        """The rows of the graph a step of rows ``0..top`` runs in: its bucket's, or a wider graph of the same
        length captured already (padding rows cost a replay far less than a capture, ~0.1 s on the H200: a
        rollout's first admission is of any size), else its bucket's, captured now."""
        assert self._graphs is not None
        rows = row_bucket(top, self.cache.slots)
        if self._graphs.ready(rows, kv_len):
            return rows
        wider = self._graphs.covering(rows, kv_len)
        if wider is not None:
            return wider
        started = time.perf_counter()
        self._graphs.capture(rows, kv_len)
        self.stats.graph_captures += 1
        self.stats.graph_capture_s += time.perf_counter() - started
        self.stats.graph_shapes = " ".join([*self.stats.graph_shapes.split()[-31:], f"{rows}x{kv_len}"])
        return rows

    def _read(self, step: _Step) -> None:
        """The tokens of a launched step: rows that finished or were cancelled since its launch drop theirs."""
        try:
            sampled = step.copy.wait()
        except Exception as exc:
            self._fail_batch(exc)
            return
        live, tokens = [], []
        for row in step.rows:
            row.in_flight -= 1
            if row.finish_reason is None and not row.cancelled:
                live.append(row)
                tokens.append(sampled[row.slot])
        self._append(live, tokens)
        self._retire([r for r in live if r.finish_reason is not None])

    # -- shutdown / failure / weights -----------------------------------------------------

    def abort_all(self) -> None:
        """Finish every running row with ``finish_reason="abort"`` and what it has sampled so far."""
        for row in self.rows:
            row.finish_reason = "abort"
        self._retire(list(self.rows), keep=False)
        self.reset()

    def reset(self) -> None:
        """Forget every row and cached prefix (after a failure)."""
        for row in self.rows:
            row.in_flight = 0
        self._in_flight = None
        self.rows = []
        self.slot_table.reset()
        self._sampling = None

    def forget_prefixes(self) -> None:
        """Drop the cached prefixes: their keys and values belong to the weights they came from."""
        self.slot_table.prefixes.clear()

    def release_cache(self) -> int:
        """Free the KV cache while no row runs (its prefixes are forgotten; the next rows grow a new one); returns
        the bytes it held (0 while rows run: nothing is freed then)."""
        if self.rows:
            return 0
        held = self.cache.slots * self.cache.capacity * self.cache.bytes_per_token
        self.forget_prefixes()
        self.cache.resize(0, 0, {})
        self.slot_table.reset()
        self._new_buffers()
        return held

    def _new_buffers(self) -> None:
        """The decode step's input buffers for the cache's new size (after :meth:`SlotTable.reserve` re-packed
        it: rows may have moved, captured graphs read the old tensors)."""
        slots, capacity, device = self.cache.slots, self.cache.capacity, self.device
        self._ids = torch.zeros((slots, 1), dtype=torch.long, device=device)
        self._pos = torch.zeros(slots, dtype=torch.long, device=device)
        self._slot_ids = torch.arange(slots, dtype=torch.long, device=device)
        self._cols = torch.arange(capacity, dtype=torch.long, device=device)
        self._sampling = None
        if self._graphs is not None:
            self._graphs.clear()

    # -- prefill --------------------------------------------------------------------------

    def _run_prefill(self, rows: list[Row]) -> None:
        self.stats.prefill_passes += 1  # one per admission, however many chunked forwards it takes
        for row in rows:
            self.stats.cached_tokens += row.cached
        forwards = plan_forwards(rows, exact=self.exact, budget=self.prefill_budget, prefix_cache=self.prefix_cache)
        flat = self._flat is not None and not self._flat.hooked() and all(row.embeds is None for row in rows)
        for forward, logits in (self._flat_forwards if flat else self._model_forwards)(forwards):
            self._count_shared(forward)
            finished = forward.finished
            if finished:  # a follower samples (with its own parameters and key) from its leader's logits
                assert logits is not None
                index = torch.tensor(finished, device=self.device)
                done = [forward.segments[i][0] for i in finished]
                sampling = SamplingBatch([r.sampling for r in done], [r.key for r in done], self.device)
                last = logits.index_select(0, index)
                allowed = grammar_mask(enumerate(r.grammar for r in done), last)
                self._append(done, to_host(sample_batch(last, sampling, [0] * len(done), allowed), sampling))

    def _model_forwards(self, forwards: list[PlannedForward]) -> Iterator[tuple[PlannedForward, torch.Tensor]]:
        """Run ``forwards`` one by one through the model's forward: each with its logits (per leader, or per segment
        where finished rows shared one)."""
        for forward in forwards:
            logits = self._prefill_forward(forward.leaders, forward.logit_rows)
            for shared in shared_columns(forward, self.device):
                self.cache.copy_columns(shared.source, shared.targets, shared.start, shared.end)
            yield forward, logits

    def _flat_forwards(self, forwards: list[PlannedForward]) -> Iterator[tuple[PlannedForward, torch.Tensor | None]]:
        """Run ``forwards`` as flat prefills of up to the prefill budget's tokens each (flat_forward.py): the same
        logits, bit for bit, where a forward gives any."""
        assert self._flat is not None
        for run in passes(forwards, self.prefill_budget):
            flat = flat_layout(run, exact=self.exact, length_step=self.length_step, scratch=self.cache.scratch,
                               pad_id=self.pad_id, device=self.device)
            for forward in run:
                self.stats.prefill_tokens += forward.tokens
            logits = self._flat.prefill(flat, self.cache)
            self._count_forward(len({id(row) for forward in run for row, _, _ in forward.leaders}))
            yield from zip(run, logits, strict=True)

    def _count_shared(self, forward: PlannedForward) -> None:
        """Count the segments ``forward``'s leaders computed for the rows that share them as cached."""
        for (row, start, end), j in zip(forward.segments, forward.lead, strict=True):
            if row is not forward.leaders[j][0]:
                row.cached += end - start
                self.stats.cached_tokens += end - start

    def _prefill_forward(self, segments: list[Segment], lead: list[int] | None = None) -> torch.Tensor:
        """One forward over left-padded segments; returns the last position's logits per segment, or with
        ``lead`` per entry of ``lead`` (the segment it reads): the output layer then runs over as many rows as
        the forward would have without sharing, so that the logits keep their bits (a CPU matrix product's
        last bits depend on its row count)."""
        width, kv_len = forward_shape(segments, exact=self.exact, length_step=self.length_step,
                                      scratch=self.cache.scratch)
        ids, pos, cols = padded_segments(segments, width, self.pad_id, self.cache.scratch)
        self.stats.prefill_tokens += sum(end - start for _, start, end in segments)
        ids, pos, cols = ids.to(self.device), pos.to(self.device), cols.to(self.device)
        slots = torch.tensor([[row.slot] for row, _, _ in segments], dtype=torch.long, device=self.device)
        mask = (self._cols[:kv_len][None, None, :] <= pos[:, :, None])[:, None]  # pad queries see column 0
        self.cache.begin(slots, cols, kv_len, slots[:, 0])
        hook = None
        if lead is not None:
            rows = torch.tensor(lead, dtype=torch.long, device=self.device)
            hook = self.model.get_output_embeddings().register_forward_pre_hook(
                lambda _, args: (args[0].index_select(0, rows), *args[1:]))
        try:
            out = self.model(**segment_inputs(self.model, ids, segments, width), position_ids=pos,
                             attention_mask=mask, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        finally:
            if hook is not None:
                hook.remove()
        self._count_forward(len(segments))
        return out.logits[:, -1, :]

    # -- decode ---------------------------------------------------------------------------

    def _decode_forward(self, batch: int, kv_len: int) -> torch.Tensor:
        """The decode step's forward, reading only the static input buffers (CUDA-graph safe)."""
        pos = self._pos[:batch]
        mask = (self._cols[:kv_len][None, :] <= pos[:, None])[:, None, None, :]
        self.cache.begin(self._slot_ids[:batch, None], pos[:, None], kv_len, None)
        if self._flat is not None and not self._flat.hooked():
            return self._flat.decode(self._ids[:batch], pos[:, None], mask, self.cache)
        out = self.model(input_ids=self._ids[:batch], position_ids=pos[:, None], attention_mask=mask,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def _safe_inputs(self, batch: int) -> None:
        """Inputs that make a warm-up forward write only scratch columns."""
        self._ids[:batch].fill_(self.pad_id)
        self._pos[:batch].fill_(self.cache.scratch)

    def _decode_sampling(self, batch: int, rows: list[Row]) -> SamplingBatch:
        layout: list[Row | None] = [None] * batch
        for row in rows:
            layout[row.slot] = row
        signature = tuple(id(r) for r in layout)
        if self._sampling is None or self._sampling[0] != signature:
            params = [r.sampling if r is not None else None for r in layout]  # None: a padding row
            keys = [r.key if r is not None else 0 for r in layout]
            self._sampling = (signature, SamplingBatch(params, keys, self.device))
        return self._sampling[1]

    def _count_forward(self, rows: int) -> None:
        self.stats.forward_passes += 1
        self.stats.max_batch_rows = max(self.stats.max_batch_rows, rows)

    # -- tokens and results ---------------------------------------------------------------

    def _append(self, rows: list[Row], sampled: list[Sampled]) -> None:
        for row, s in zip(rows, sampled, strict=True):
            row.output_ids.append(s.token_id)
            if row.grammar is not None:
                row.grammar.accept(s.token_id)
            row.logprobs.append(s.logprob)
            if row.top_logprobs is not None and s.top is not None:
                row.top_logprobs.append(s.top)
            self.stats.tokens_generated += 1
            self._check_stop(row)
            if row.finish_reason is None and len(row.output_ids) > row.streamed:
                tops = row.top_logprobs[row.streamed :] if row.top_logprobs is not None else None
                row.sink.delta(row.output_ids[row.streamed :], row.logprobs[row.streamed :], tops)
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

    def _retire(self, rows: list[Row], *, keep: bool = True, deliver: bool = True) -> None:
        """Rows leave the batch (their slots become cached prefixes); results go to their sinks."""
        if not rows:
            return
        gone = set(map(id, rows))
        self.rows = [r for r in self.rows if id(r) not in gone]
        self._sampling = None
        for row in rows:
            self.slot_table.release(row, keep=keep)
            if deliver:
                self._deliver(row)

    def _deliver(self, row: Row) -> None:
        self.stats.requests_finished += 1
        assert row.finish_reason is not None
        result = GenerateResult(
            output_ids=list(row.output_ids),
            logprobs=list(row.logprobs),
            finish_reason=row.finish_reason,
            prompt_tokens=len(row.prompt_ids),
            policy_version=self.policy_version,
            matched_stop=row.matched_stop,
            top_logprobs=row.top_logprobs,
            cached_tokens=row.cached,
            prompt_logprobs=row.prompt_scores[0] if row.prompt_scores else None,
            prompt_top_logprobs=row.prompt_scores[1] if row.prompt_scores else None,
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
