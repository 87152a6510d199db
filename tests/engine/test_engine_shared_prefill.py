"""Rows admitted together compute their common prompt spans once (the local engine's in-admission prefix
sharing): a common system prompt, a group's identical prompts. In exact mode (the CPU) what is sampled is bit
for bit what an engine without sharing (``prefix_cache=False``) samples, and the shared tokens count as cached."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from test_engine_exactness import DEVICE

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams
from agentr1.engine import Engine, EngineOptions, Row
from agentr1.engine.prefix import CHUNK

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="bit identity holds in exact mode (the CPU)")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path: Any) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)

SYSTEM = ("<|im_start|>system\nYou are a careful agent. Call the tools below, one at a time, and check each "
          "result before you answer. Tools: add(a, b), mul(a, b), sub(a, b), div(a, b).<|im_end|>\n")


class _Result:
    """A row's sink that keeps its result (or error)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None

    def delta(self, token_ids: list[int], logprobs: list[float], tops: Any = None) -> None:
        pass

    def result(self, result: GenerateResult, token_ids: list[int], logprobs: list[float]) -> None:
        self.value = result
        self.done.set()

    def error(self, exc: BaseException) -> None:
        self.value = exc
        self.done.set()


def admit_together(engine: Engine, requests: list[GenerateRequest]) -> list[GenerateResult]:
    """Queue ``requests`` at once (so that one admission prefills them all) and wait for their results."""
    sinks = [_Result() for _ in requests]
    engine.enqueue(*(Row(list(r.prompt_ids), r.sampling, s) for r, s in zip(requests, sinks, strict=True)))
    assert all(s.done.wait(120) for s in sinks)
    assert not any(isinstance(s.value, BaseException) for s in sinks), [s.value for s in sinks]
    return [s.value for s in sinks]


def with_and_without_sharing(path: Any, requests: list[GenerateRequest]) -> tuple[list[GenerateResult], ...]:
    """The results of one admission of ``requests`` on an engine that shares and on one that does not, and the
    two engines' (prefill_tokens, cached_tokens, prefill_passes)."""
    outcome = []
    for prefix_cache in (True, False):
        engine = Engine(path, EngineOptions(device=DEVICE, dtype="float32", max_batch_size=16, threads=1,
                                            prefix_cache=prefix_cache))
        engine.start()
        try:
            results = admit_together(engine, requests)
            stats = engine.stats
            outcome.append((results, (stats.prefill_tokens, stats.cached_tokens, stats.prefill_passes)))
        finally:
            engine.close()
    (shared, shared_stats), (plain, plain_stats) = outcome
    return shared, plain, shared_stats, plain_stats


def agent_batch(tok: Any, **sampling: Any) -> tuple[list[GenerateRequest], int]:
    """Six sessions' first calls (a system prompt of 3 full chunks and a bit, then distinct questions), a group
    of three identical prompts, a group of two prompts of exactly 4 chunks, and two prompts that differ in their
    first chunk only (nothing shared: the keys of a chunk depend on the chunks before it); and the prompt tokens
    the sharing engine should not prefill."""
    system = tok.encode(SYSTEM, add_special_tokens=False)[: 3 * CHUNK + 5]
    names = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi"]
    suffixes = [tok.encode(f"{name} asks: what is {3 + i} * {7 + 2 * i}?<|im_end|>\n<|im_start|>assistant\n",
                           add_special_tokens=False) for i, name in enumerate(names)]
    assert len({s[0] for s in suffixes}) == len(suffixes)  # the prompts differ from the chunk after the system's
    prompts = [system + s for s in suffixes[:6]]
    group = system + suffixes[6]
    boundary = (system + suffixes[7])[: 4 * CHUNK]
    prompts += [group] * 3 + [boundary] * 2 + [[1000 + i] * CHUNK + system + suffixes[0] for i in range(2)]
    seeds = iter(range(1, 100))
    requests = [GenerateRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=6 + i % 4, seed=next(seeds),
                                                                      **sampling))
                for i, p in enumerate(prompts)]
    shared = 3 * CHUNK * (len(prompts) - 3) + 2 * (len(group) - 3 * CHUNK) + CHUNK
    return requests, shared


@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.0, top_logprobs=2)],
                         ids=["temperature-1", "greedy"])
def test_rows_admitted_together_share_prefill_and_sample_the_same_bits(tiny_model_path, tokenizer, sampling):
    requests, shared = agent_batch(tokenizer, **sampling)
    with_sharing, without, (prefilled, cached, passes), (plain_prefilled, plain_cached, _) = \
        with_and_without_sharing(tiny_model_path, requests)
    for a, b in zip(with_sharing, without, strict=True):
        assert (a.output_ids, a.logprobs, a.finish_reason) == (b.output_ids, b.logprobs, b.finish_reason)
        assert a.top_logprobs == b.top_logprobs
    total = sum(len(r.prompt_ids) for r in requests)
    assert passes == 1 and plain_cached == 0 and plain_prefilled == total
    assert cached == shared == sum(r.cached_tokens for r in with_sharing)
    assert prefilled + cached == total and prefilled == total - shared
    assert [r.cached_tokens for r in with_sharing[:2]] == [0, 3 * CHUNK]
    assert [r.cached_tokens for r in with_sharing[6:]] == [3 * CHUNK] + [len(requests[6].prompt_ids)] * 2 + \
        [3 * CHUNK, 4 * CHUNK, 0, 0]


def test_followers_of_a_whole_prompt_sample_with_their_own_parameters(tiny_model_path, tokenizer):
    """A group's identical prompts are prefilled once; each member samples its first token (and the rest)
    with its own seed, temperature and length from the shared logits."""
    prompt = tokenizer.encode(SYSTEM + "<|im_start|>user\nwhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n",
                                      add_special_tokens=False)
    settings = [dict(temperature=1.5, seed=s, max_new_tokens=3 + s) for s in range(6)] + \
               [dict(temperature=0.0, max_new_tokens=4)]
    requests = [GenerateRequest(prompt_ids=list(prompt), sampling=SamplingParams(**s)) for s in settings]
    with_sharing, without, (prefilled, cached, _), _ = with_and_without_sharing(tiny_model_path, requests)
    assert prefilled == len(prompt) and cached == 6 * len(prompt)
    assert [r.cached_tokens for r in with_sharing] == [0] + [len(prompt)] * 6
    for a, b, s in zip(with_sharing, without, settings, strict=True):
        assert (a.output_ids, a.logprobs) == (b.output_ids, b.logprobs)
        assert len(a.output_ids) == s["max_new_tokens"] or a.finish_reason == "stop"
    assert len({r.output_ids[0] for r in with_sharing}) > 1  # own keys: not one shared sample
