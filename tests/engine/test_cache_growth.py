"""The slot cache grows as rows decode instead of reserving their whole ``max_new_tokens`` up front (issue 59: a call
without ``max_tokens`` may run to the model's context): rows that outgrow it mid-decode move to a larger cache and
sample exactly what rows that reserved everything at admission sample."""

from __future__ import annotations

import asyncio

import pytest

from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.engine import EngineOptions, Row, slots
from agentr1.gateway.backends import LocalBackend

NEW_TOKENS = 300


def _run(path, *, overlap: bool) -> tuple[list, list[int]]:
    """Four rows of NEW_TOKENS tokens each (sampled: the tiny random model seldom ends a turn); the results and the
    cache's capacity after each admission or growth."""
    backend = LocalBackend(path, EngineOptions(device="cpu", dtype="float32", threads=1, max_batch_size=4,
                                               overlap=overlap))
    backend.engine.start()
    capacities: list[int] = []
    cache = backend.engine.batch.cache
    resize = cache.resize

    def recording_resize(slots_: int, capacity: int, *args, **kwargs):
        capacities.append(capacity)
        return resize(slots_, capacity, *args, **kwargs)

    cache.resize = recording_resize
    tok = backend.engine.tokenizer
    requests = [GenerateRequest(tok.encode(f"<|im_start|>user\nstory {i}<|im_end|>\n<|im_start|>assistant\n",
                                           add_special_tokens=False),
                                SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, seed=i, top_logprobs=2))
                for i in range(4)]

    async def together():
        return await asyncio.gather(*(backend.generate(r) for r in requests))

    try:
        return asyncio.run(together()), capacities
    finally:
        asyncio.run(backend.close())


@pytest.mark.parametrize("overlap", [False, True], ids=["read-each-step", "overlap"])
def test_rows_that_outgrow_the_cache_sample_what_rows_that_reserved_everything_do(tiny_model_path, monkeypatch,
                                                                                  overlap):
    monkeypatch.setattr(slots, "RESERVE_AHEAD", 10_000)  # everything reserved at admission, as before
    reserved, reserved_capacities = _run(tiny_model_path, overlap=overlap)
    monkeypatch.setattr(slots, "RESERVE_AHEAD", 16)
    grown, grown_capacities = _run(tiny_model_path, overlap=overlap)
    assert len(reserved_capacities) == 1 and reserved_capacities[0] > NEW_TOKENS
    assert len(grown_capacities) >= 2 and grown_capacities[0] < 2 * slots.LENGTH_STEP + 1  # grew as rows decoded
    assert sorted(grown_capacities) == grown_capacities
    assert max(len(r.output_ids) for r in grown) > grown_capacities[0]  # rows did outgrow the first cache
    for a, b in zip(grown, reserved, strict=True):
        assert a.output_ids == b.output_ids and a.logprobs == b.logprobs and a.top_logprobs == b.top_logprobs
        assert a.finish_reason == b.finish_reason


def test_a_row_reserves_its_whole_limit_when_it_is_small_and_a_window_ahead_otherwise():
    def row(prompt: int, made: int, limit: int, in_flight: int = 0) -> Row:
        r = Row([0] * prompt, SamplingParams(max_new_tokens=limit), sink=None, output_ids=[0] * made)
        r.in_flight = in_flight
        return r

    assert slots.reserved_length(row(100, 0, 512)) == 612  # max_tokens within the window: all of it, as before
    assert slots.reserved_length(row(100, 0, 30_000)) == 100 + slots.RESERVE_AHEAD
    assert slots.reserved_length(row(100, 2000, 30_000, in_flight=1)) == 100 + 2001 + slots.RESERVE_AHEAD
