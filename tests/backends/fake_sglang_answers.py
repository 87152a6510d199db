"""How the fake SGLang server (fake_sglang.py, whose docstring describes the protocol) answers ``/generate``: its
state, the prefix cache behind ``meta_info.cached_tokens``, meta_info in SGLang 0.5.17's order, finish reasons and
aborts, whole answers and stream events from the local engine's tokens."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from agentr1.core.generation import GenerateRequest, GenerateResult


def _common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@dataclass
class PrefixCache:
    """What SGLang's radix cache holds, for ``meta_info.cached_tokens``: each finished request leaves its prompt and
    output there but the last token (whose keys and values were never computed), until ``/flush_cache`` or a weight
    update empties it. A new request reuses its longest cached prefix, at most all of its prompt but the last token
    (the recordings: 16 of a 17-token prompt sent again), and with ``logprob_start_len`` 0 none of it (the prompt's
    log-probabilities need its logits; from SGLang's source, not recorded). Bookkeeping only: the engine keeps its own."""

    sequences: list[tuple[int, ...]] = field(default_factory=list)
    most: int = 256  # sequences kept (SGLang evicts the least recently used when its memory fills)

    def match(self, ids: list[int], limit: int) -> int:
        longest = max((_common_prefix(seq, ids) for seq in self.sequences), default=0)
        return max(0, min(longest, limit))

    def insert(self, ids: list[int]) -> None:
        self.sequences = [*self.sequences[-(self.most - 1):], tuple(ids)]

    def clear(self) -> None:
        self.sequences = []


@dataclass
class FakeSGLangState:
    """One fake server: its engine and settings, what it was sent (for tests) and what runs on it."""

    engine: Any
    model_path: str
    served_model_name: str
    context_len: int
    stream_output: bool = False
    skip_tokenizer_init: bool = False
    weight_version: str = "default"
    paused: bool = False
    unhealthy: bool = False
    fail_next: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    running: dict[str, asyncio.Task[Any] | None] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)
    decoder: Any = None
    vocab_size: int = 0  # the model's input ids are below it
    pending_tensors: dict[str, Any] = field(default_factory=dict)  # buckets of a tensor update not loaded yet
    prefixes: PrefixCache = field(default_factory=PrefixCache)


WAITING_ABORT = {"type": "abort", "message": "Abort in waiting queue"}  # TokenizerManager._handle_abort_req
RUNNING_ABORT = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}  # FINISH_ABORT, recorded


def _finish(result: GenerateResult | None, max_new: int) -> dict[str, Any] | None:
    if result is None:
        return None
    if result.finish_reason == "length":
        return {"type": "length", "length": max_new}
    if result.finish_reason == "abort":
        return dict(RUNNING_ABORT)
    return {"type": "stop", "matched": result.matched_stop}


@dataclass
class Generation:
    """One ``/generate`` as it runs: the request, its options, what was sampled so far and what was sent."""

    req: GenerateRequest
    opts: dict[str, Any]
    cached: int  # meta_info.cached_tokens: the prompt's tokens found in the prefix cache
    started: float = field(default_factory=time.monotonic)
    ids: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    tops: list[Any] = field(default_factory=list)
    scored: GenerateResult | None = None  # the result whose prompt log-probabilities are sent (logprob_start_len 0)
    finish: dict[str, Any] | None = None
    sent: int = 0  # tokens sent in earlier stream events

    def add(self, ids: list[int], lps: list[float], tops: list[Any]) -> None:
        self.ids, self.lps, self.tops = self.ids + ids, self.lps + lps, self.tops + tops


def answer_body(state: FakeSGLangState, gen: Generation) -> dict[str, Any]:
    """One answer, or one stream event, with meta_info's keys in the order the tokenizer manager writes them
    (module docstring)."""
    req, opts, ids, finish = gen.req, gen.opts, gen.ids, gen.finish
    cut = gen.sent if opts["stream"] and state.stream_output else 0
    waiting = finish == WAITING_ABORT
    meta: dict[str, Any] = {"id": opts["rid"], "finish_reason": finish}
    if not waiting:
        meta.update(prompt_tokens=len(req.prompt_ids), weight_version=state.weight_version, num_retractions=0)
    else:
        meta.update(weight_version=state.weight_version, e2e_latency=time.monotonic() - gen.started)
    if opts["return_logprob"]:
        scored = gen.scored
        prompt = scored.prompt_logprobs if scored is not None and scored.prompt_logprobs else []
        meta["input_token_logprobs"] = [[lp, t, None] for lp, t in zip(prompt, req.prompt_ids, strict=False)]
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(gen.lps, ids, strict=True)][cut:]
        meta["output_token_logprobs_length"] = len(ids)
        if req.sampling.top_logprobs:
            meta["input_top_logprobs"] = [[[x.logprob, x.token_id, None] for x in top] if i else None
                                          for i, top in enumerate(scored.prompt_top_logprobs or [])] if prompt else []
            meta["output_top_logprobs"] = [[[x.logprob, x.token_id, None] for x in top] for top in gen.tops][cut:]
    if waiting:
        meta["completion_tokens"] = len(ids)
        return {"text": "", "output_ids": ids[cut:], "meta_info": meta}
    meta.update(reasoning_tokens=0, completion_tokens=len(ids), cached_tokens=gen.cached,
                cached_tokens_details={"device": gen.cached, "host": 0} if gen.cached else None, dp_rank=None)
    if finish is not None:
        meta["e2e_latency"] = time.monotonic() - gen.started
    if gen.sent == 0:  # set once, on the first answer sent (_wait_one_response)
        meta["response_sent_to_client_ts"] = time.time()
    out: dict[str, Any] = {"output_ids": ids[cut:], "meta_info": meta}
    if not state.skip_tokenizer_init:
        text = state.decoder.decode(ids, skip_special_tokens=opts["skip_special_tokens"])
        matched = (finish or {}).get("matched")
        if isinstance(matched, str) and not opts["no_stop_trim"] and matched in text:
            text = text[: text.index(matched)]
        out = {"text": text, **out}
    return out


async def _sampled(state: FakeSGLangState, req: GenerateRequest, rid: str) -> AsyncIterator[tuple[Any, ...]]:
    """(token ids, logprobs, top logprobs, result, scored result) as the engine samples them. Top and prompt
    log-probabilities come only with a whole result, so such a request is generated whole (an abort cancels it: no
    token) and its tokens replayed one by one; the others stream from the engine (an abort ends them after the next
    token, which the aborted answer carries)."""
    if not (req.sampling.top_logprobs or req.prompt_logprobs):
        async with aclosing(state.engine.stream(req)) as deltas:
            async for delta in deltas:
                yield delta.token_ids, delta.logprobs, [], delta.result, None
        return
    task = asyncio.ensure_future(state.engine.generate(req))
    state.running[rid] = task
    try:
        whole: GenerateResult = await task
    except asyncio.CancelledError:
        if rid not in state.aborted:
            raise
        return
    tops = whole.top_logprobs or [[]] * len(whole.output_ids)
    for k, (t, lp, top) in enumerate(zip(whole.output_ids, whole.logprobs, tops, strict=True)):
        yield [t], [lp], [top], whole if k == len(whole.output_ids) - 1 else None, whole


async def answers(state: FakeSGLangState, req: GenerateRequest, opts: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """A stream's events, or the one answer of a request not streamed. A request aborted while it runs ends with
    FINISH_ABORT and the tokens it has (recorded); one aborted before its first token as SGLang answers a request
    aborted in its waiting queue."""
    rid = opts["rid"]
    state.aborted.discard(rid)  # a request id used again
    limit = len(req.prompt_ids) - 1 if not req.prompt_logprobs else 0
    gen = Generation(req, opts, cached=state.prefixes.match(req.prompt_ids, limit))
    state.running[rid] = None
    try:
        async with aclosing(_sampled(state, req, rid)) as sampled:
            async for ids, lps, tops, result, scored in sampled:
                gen.add(ids, lps, tops)
                gen.scored = scored
                gen.finish = dict(RUNNING_ABORT) if rid in state.aborted else _finish(result, req.sampling.max_new_tokens)
                if opts["stream"]:
                    yield answer_body(state, gen)
                    gen.sent = len(gen.ids)
                if gen.finish is not None:
                    break
    finally:
        state.running.pop(rid, None)
    if gen.finish is None:  # aborted before its first token
        gen.finish = dict(WAITING_ABORT)
    else:
        state.prefixes.insert(req.prompt_ids + gen.ids[:-1])
    if not opts["stream"] or gen.finish == WAITING_ABORT:
        yield answer_body(state, gen)
