"""Constrained decoding on the local engine on a GPU (CUDA graphs on): SmolLM2 answers JSON under a schema and forced
tool calls, batched with unconstrained rows; prints whether every constrained answer validates, whether the
unconstrained rows sampled the same ids as in a batch without grammar rows, and the decode time per step with and
without grammar rows (the batch's wall time / its tokens). Logprobs of the unconstrained rows may differ by float
noise once a constrained row leaves the batch earlier than its unconstrained twin did (a smaller decode batch is
another matmul shape); the mask itself leaves them untouched (tests/gateway/test_constrained_smollm2.py).

    python scripts/gpu/grammar_check.py MODEL_DIR [--device cuda] [--rows 16]

(On the device machine, after ``source scripts/gpu/lib.sh; gpu_collect; gpu_env``: MODEL_DIR=$(gpu_smollm2); the
carried wheels must include xgrammar and apache-tvm-ffi, see scripts/gpu/prepare.sh.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import jsonschema

from agentr1.core.generation import GenerateRequest, GrammarSpec, SamplingParams
from agentr1.core.rendering import load_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                         "population": {"type": "integer", "minimum": 0, "maximum": 99999999},
                                         "capital": {"type": "boolean"}},
        "required": ["city", "population", "capital"], "additionalProperties": False}
PROMPTS = ["Tell me about Paris.", "Describe a big city in Japan.", "What is the largest city in Brazil?",
           "Hi there!", "Name a river.", "Write a haiku about rain.", "What is 12*7?", "Who wrote Hamlet?"]


async def run_batch(backend, prompts, grammar_rows, spec):
    params = SamplingParams(max_new_tokens=48, temperature=0)
    await backend.pause()
    jobs = [asyncio.create_task(backend.generate(GenerateRequest(list(ids), params,
                                                                 grammar=spec if i in grammar_rows else None)))
            for i, ids in enumerate(prompts)]
    while backend.queue_depth < len(prompts):
        await asyncio.sleep(0.01)
    started = time.perf_counter()
    await backend.resume()
    results = await asyncio.gather(*jobs)
    return results, time.perf_counter() - started


async def main(model: str, device: str, rows: int) -> None:
    renderer = load_renderer(model)
    prompts = [renderer.render([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], None,
                               add_generation_prompt=True) for i in range(rows)]
    backend = LocalBackend(model, EngineOptions(device=device, prefix_cache=False,
                                                threads=1 if device == "cpu" else None))
    await backend.start()
    spec = GrammarSpec("json_schema", json.dumps(CITY))
    constrained = set(range(0, rows, 2))
    try:
        await run_batch(backend, prompts, constrained, spec)  # warm-up: compiles the grammar, captures graphs
        free, free_s = await run_batch(backend, prompts, set(), spec)
        mixed, mixed_s = await run_batch(backend, prompts, constrained, spec)
    finally:
        await backend.close()
    valid = 0
    for i in sorted(constrained):
        text = renderer.tokenizer.decode(mixed[i].output_ids, skip_special_tokens=True)
        try:
            jsonschema.validate(json.loads(text), CITY)
            valid += 1
        except (ValueError, jsonschema.ValidationError) as exc:
            print(f"row {i}: INVALID ({mixed[i].finish_reason}) {text!r}: {exc}")
    same = [i for i in range(rows) if i not in constrained and mixed[i].output_ids == free[i].output_ids]
    max_lp = max((abs(a - b) for i in same for a, b in zip(mixed[i].logprobs, free[i].logprobs, strict=True)),
                 default=0.0)
    tokens_free, tokens_mixed = sum(len(r.output_ids) for r in free), sum(len(r.output_ids) for r in mixed)
    print(json.dumps({
        "device": device, "rows": rows, "constrained_rows": len(constrained), "constrained_valid": valid,
        "unconstrained_same_ids": f"{len(same)}/{rows - len(constrained)}",
        "unconstrained_max_logprob_diff": max_lp,
        "free_batch_s": round(free_s, 3), "mixed_batch_s": round(mixed_s, 3),
        "free_ms_per_token": round(1000 * free_s / tokens_free, 3),
        "mixed_ms_per_token": round(1000 * mixed_s / tokens_mixed, 3),
        "example": renderer.tokenizer.decode(mixed[0].output_ids, skip_special_tokens=True),
    }, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(main(args.model, args.device, args.rows))
