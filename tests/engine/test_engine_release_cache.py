"""An idle engine gives its KV cache back on request (a trainer before its update, ``Serving.release_cache``), and
the rows after that grow a new one and sample what they sampled before: seeded rows, the same tokens and log-probs."""

from __future__ import annotations

import asyncio

import pytest

from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend


def _requests() -> list[GenerateRequest]:
    return [GenerateRequest(prompt_ids=[1, 2, 3, 4 + i], sampling=SamplingParams(max_new_tokens=12, seed=i))
            for i in range(3)]


async def _generate(backend: LocalBackend) -> list[tuple[list[int], list[float]]]:
    results = await asyncio.gather(*(backend.generate(r) for r in _requests()))
    return [(list(r.output_ids), [round(x, 5) for x in r.logprobs]) for r in results]


@pytest.fixture
def backend(tiny_model_path):
    backend = LocalBackend(str(tiny_model_path), EngineOptions(device="cpu", dtype="float32", threads=1))
    backend.engine.start()
    yield backend
    backend.engine.close()


def test_an_idle_engine_releases_its_kv_cache_and_grows_a_new_one_for_the_next_rows(backend):
    engine = backend.engine
    assert engine.release_cache() == 0  # nothing generated yet: no cache to give back
    first = asyncio.run(_generate(backend))
    cache = engine.batch.cache
    held = cache.slots * cache.capacity * cache.bytes_per_token
    assert held > 0 and cache.keys[0].numel() > 0

    freed = asyncio.run(backend.release_cache())
    assert freed == held
    assert cache.slots == cache.capacity == 0 and cache.keys[0].numel() == 0
    assert engine.batch.slot_table.prefixes.slots() == []  # the prefixes went with it

    assert asyncio.run(_generate(backend)) == first  # a new cache, the same samples
    assert cache.slots > 0 and engine.release_cache() > 0


def test_an_engine_in_another_process_keeps_its_cache(tiny_model_path):
    """Its memory is its own process's: releasing it would not lower the trainer's."""
    backend = LocalBackend(str(tiny_model_path), EngineOptions(device="cpu", dtype="float32", threads=1),
                           engine_process=True)
    backend.engine.start()
    try:
        asyncio.run(_generate(backend))
        assert asyncio.run(backend.release_cache()) == 0
    finally:
        backend.engine.close()
