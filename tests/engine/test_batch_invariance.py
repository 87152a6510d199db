"""With ``batch_invariant`` a row's tokens and log-probabilities on the CPU do not depend on the rows it is decoded
with nor on the thread count: a greedy evaluation then gives the same episodes whatever other episodes run beside
each of its calls (docs/evaluation.md, reproducibility). Without the engine's care (decode steps of two rows at
least, a lone row's log-normaliser summed beside a copy) SmolLM2's rows decoded alone differed from the same rows in
company in the last bits of their logits from the second decode step on, and one of four greedy replies took another
token."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend
from agentr1.trainer.cpu_dtypes import cpu_has_bfloat16_matmuls

pytestmark = pytest.mark.slow

DTYPES = ["float32", pytest.param("bfloat16", marks=pytest.mark.skipif(
    not cpu_has_bfloat16_matmuls(), reason="bfloat16 is emulated on this CPU: the engine serves float32"))]


def _prompts(backend: LocalBackend) -> list[list[int]]:
    tok = backend.engine.tokenizer
    return [tok.encode(f"<|im_start|>user\nCompute {17 + 7 * i} + {23 * i + 5}, then multiply by {i + 2}. Explain."
                       "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False) for i in range(4)]


def _greedy(path: Path, dtype: str, threads: int, *, together: bool) -> list[GenerateResult]:
    """The four prompts' greedy replies on ``threads`` threads: one after the other (each decoded alone), or all at
    once (decoded beside each other, rows joining and leaving as they start and end)."""
    backend = LocalBackend(path, EngineOptions(device="cpu", dtype=dtype, threads=threads, batch_invariant=True))
    backend.engine.start()
    try:
        requests = [GenerateRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=24 + 4 * i, temperature=0.0))
                    for i, p in enumerate(_prompts(backend))]

        async def run() -> list[GenerateResult]:
            if together:
                return list(await asyncio.gather(*(backend.generate(r) for r in requests)))
            return [await backend.generate(r) for r in requests]

        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_row_gets_the_same_bits_alone_and_in_company_on_any_thread_count(smollm2_path: Path, dtype: str) -> None:
    # both at once: another thread count and company (either one alone changing a bit fails the comparison; one
    # engine run less per factor, the suite's time)
    alone = _greedy(smollm2_path, dtype, 1, together=False)
    other = _greedy(smollm2_path, dtype, 2, together=True)
    for a, b in zip(alone, other, strict=True):
        assert b.output_ids == a.output_ids
        assert b.logprobs == a.logprobs  # bit for bit
