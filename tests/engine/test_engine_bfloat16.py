"""The local engine in bfloat16 on the CPU (``LocalBackend(dtype="bfloat16")``, the gateway's and the trainer's
``engine.dtype``), with the real SmolLM2: its weights and KV cache are bfloat16, and the log-probabilities it
returns for the tokens it samples are within bfloat16's rounding of a plain float32 forward pass of the same ids.

The bars come from a measurement (2026-12-04, 8 chat prompts x 24 tokens at temperature 1): mean |difference|
0.04 nats per token, max 0.22; a plain bfloat16 forward of the same ids differs from the engine by as much (its
kernels round in another order). A float32 engine would be within 1e-4 (test_engine_exactness.py), so the lower
bar checks that the computation really ran in bfloat16."""

from __future__ import annotations

import asyncio
import statistics

import torch
from transformers import AutoModelForCausalLM

from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

QUESTIONS = ["What is 12*7?", "Name a colour.", "Why is the sky blue?", "Add 35 and 48.", "Write a haiku.",
             "Say hello.", "What is 2+2?", "Count to five."]


def test_a_bfloat16_engine_samples_within_bfloat16_rounding_of_float32(smollm2_path):
    backend = LocalBackend(smollm2_path, EngineOptions(device="cpu", dtype="bfloat16", max_batch_size=8))
    backend.engine.start()
    try:
        assert backend.engine.model.dtype == torch.bfloat16 and backend.engine.batch.cache.dtype == torch.bfloat16
        tok = backend.engine.tokenizer
        requests = [GenerateRequest(
            prompt_ids=tok.encode(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                          tokenize=False), add_special_tokens=False),
            sampling=SamplingParams(max_new_tokens=16, temperature=1.0, seed=i)) for i, q in enumerate(QUESTIONS)]

        async def together() -> list:
            return await asyncio.gather(*(backend.generate(r) for r in requests))

        results = asyncio.run(together())
    finally:
        asyncio.run(backend.close())
    reference = AutoModelForCausalLM.from_pretrained(str(smollm2_path), dtype=torch.float32)
    differences = []
    for request, result in zip(requests, results, strict=True):
        assert result.output_ids and len(result.logprobs) == len(result.output_ids)
        with torch.no_grad():
            logits = reference(torch.tensor([request.prompt_ids + result.output_ids])).logits[0]
        logp = torch.log_softmax(logits.float(), dim=-1)
        start = len(request.prompt_ids) - 1
        differences += [abs(lp - float(logp[start + i, t])) for i, (t, lp) in
                        enumerate(zip(result.output_ids, result.logprobs, strict=True))]
    mean = statistics.mean(differences)
    assert 1e-3 < mean < 0.1, f"mean |engine - float32| {mean:.4f} over {len(differences)} tokens"
    assert max(differences) < 1.0, f"max |engine - float32| {max(differences):.4f}"
