"""The local engine's overlap (the host queues decode step k+1 before it reads step k's tokens) changes nothing
that is sampled: the same ids, stops, finish reasons and top alternatives as reading every step at once, log-probs
of the sampled tokens equal to a plain forward, prefix reuse as exact as without it. On the CPU (where it is off
by default) it runs the same bookkeeping with nothing to overlap; ``AGENTR1_TEST_DEVICE=cuda`` runs it on a GPU."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_engine_exactness import (
    DEVICE,
    TOLERANCE,
    check_logprobs_match_a_plain_forward,
    check_prefix_reuse_is_exact,
    generate_all,
    start,
)

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams
from agentr1.gateway.backends import LocalBackend


def mixed_requests(backend: LocalBackend) -> list[GenerateRequest]:
    """Rows that end at different steps and for every reason: token limits, stop strings, stop ids, greedy and
    seeded sampling with top-p / top-k, top alternatives."""
    tok = backend.engine.tokenizer
    settings: list[dict[str, Any]] = [
        dict(temperature=0.0), dict(temperature=1.0, seed=11, stop=["e"]), dict(temperature=0.8, top_p=0.9, seed=12),
        dict(temperature=1.0, top_k=20, seed=13, top_logprobs=2), dict(temperature=1.0, seed=14, stop=["a", "o"]),
        dict(temperature=0.0, top_logprobs=3), dict(temperature=1.0, seed=15)]
    requests = []
    for i in range(14):
        text = f"<|im_start|>user\nrequest {i}: " + "more " * (i % 5) + "<|im_end|>\n<|im_start|>assistant\n"
        ids = tok.encode(text, add_special_tokens=False)
        sampling = dict(settings[i % len(settings)], max_new_tokens=3 + 5 * (i % 6))
        if i % 4 == 3:  # stop on a token the random model samples often enough (the prompt's own first token)
            sampling["stop_token_ids"] = [ids[1], ids[2]]
        requests.append(GenerateRequest(prompt_ids=ids, sampling=SamplingParams(**sampling)))
    return requests


def run_counted(path: Any, device: str, overlap: bool) -> tuple[list[GenerateResult], dict[str, int]]:
    """The mixed requests on one engine; counts of its decode steps launched with a step in flight and of the
    row-steps whose token was dropped (rows that finished while their next step was in flight)."""
    backend = start(path, device, max_batch_size=16, overlap=overlap)
    engine = backend.engine.batch
    assert engine is not None
    counts = {"launches": 0, "overlapped": 0, "dropped": 0}
    launch, read = engine._launch, engine._read

    def counted_launch(rows: list[Any]) -> Any:
        counts["launches"] += 1
        counts["overlapped"] += engine._in_flight is not None
        return launch(rows)

    def counted_read(step: Any) -> None:
        counts["dropped"] += sum(r.finish_reason is not None or r.cancelled for r in step.rows)
        read(step)

    engine._launch, engine._read = counted_launch, counted_read
    try:
        return generate_all(backend, mixed_requests(backend)), counts
    finally:
        asyncio.run(backend.close())


def check_overlap_samples_what_reading_every_step_samples(path: Any, device: str) -> None:
    in_step, in_step_counts = run_counted(path, device, False)
    overlapped, counts = run_counted(path, device, True)
    for a, b in zip(in_step, overlapped, strict=True):
        assert (b.output_ids, b.finish_reason, b.matched_stop) == (a.output_ids, a.finish_reason, a.matched_stop)
        assert b.logprobs == pytest.approx(a.logprobs, abs=TOLERANCE[device])
        assert [[t.token_id for t in top] for top in b.top_logprobs or []] == \
            [[t.token_id for t in top] for top in a.top_logprobs or []]
    stopped = sum(r.finish_reason == "stop" for r in in_step)
    assert stopped >= 3 and sum(r.finish_reason == "length" for r in in_step) >= 3  # both kinds of end were met
    assert in_step_counts["overlapped"] == 0 and in_step_counts["dropped"] == 0
    assert counts["overlapped"] >= 0.8 * counts["launches"] - 1  # only the first step after a prefill waits
    # a token is dropped only for a row that stopped (an end token, a stop string) while its next step ran;
    # rows at their token limit are left out of the next step
    assert counts["dropped"] <= stopped


def test_overlap_samples_what_reading_every_step_samples(tiny_model_path):
    check_overlap_samples_what_reading_every_step_samples(tiny_model_path, DEVICE)


def test_overlap_keeps_logprobs_equal_to_a_plain_forward(tiny_model_path):
    check_logprobs_match_a_plain_forward(tiny_model_path, DEVICE, overlap=True)


def test_overlap_keeps_prefix_reuse_exact(tiny_model_path):
    check_prefix_reuse_is_exact(tiny_model_path, DEVICE, bit_exact=DEVICE == "cpu", overlap=True)


def test_rows_with_a_grammar_decode_beside_free_rows_under_overlap(tiny_model_path):
    """A constrained row's next mask needs its last token, so with one in the batch every step is read before the
    next: the constrained rows follow their grammar and every row samples what it samples without overlap."""
    pytest.importorskip("xgrammar")
    from agentr1.core.generation import GrammarSpec

    def requests() -> list[GenerateRequest]:
        free = [GenerateRequest([1, 30 + i, 31], SamplingParams(max_new_tokens=12 + i, temperature=1.0, seed=i))
                for i in range(4)]
        constrained = [GenerateRequest([1, 40 + i, 41], SamplingParams(max_new_tokens=40, temperature=1.0, seed=10 + i),
                                       grammar=GrammarSpec("regex", "[0-9]{3}")) for i in range(2)]
        return free + constrained

    results = {}
    for overlap in (False, True):
        backend = start(tiny_model_path, DEVICE, overlap=overlap)
        try:
            results[overlap] = generate_all(backend, requests())
            decode = backend.engine.tokenizer.decode
            texts = [decode(r.output_ids, skip_special_tokens=True) for r in results[overlap][4:]]
        finally:
            asyncio.run(backend.close())
        assert all(len(t) == 3 and t.isdigit() for t in texts), texts
    for a, b in zip(results[False], results[True], strict=True):
        assert (b.output_ids, b.finish_reason) == (a.output_ids, a.finish_reason)
        assert b.logprobs == pytest.approx(a.logprobs, abs=TOLERANCE[DEVICE])
