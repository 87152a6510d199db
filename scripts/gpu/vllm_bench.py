"""Decode speed of a vLLM server through the gateway's ``vllm`` backend, on the requests of
bench/engine_gpu_bench.py (the embedded engine's side): the same random prompts (same generator and
seeds), the same lengths, temperature 1, one seed per request, all of a batch submitted together through
``backend.generate`` as the engine benchmark does with the local backend.

    python3 scripts/gpu/vllm_bench.py --url http://127.0.0.1:8000 --out vllm_bench.jsonl [--batches 1 32 128 256]

vLLM serves SmolLM2-135M-Instruct's real weights; the engine benchmark uses random weights of the same
shape. ``ignore_eos`` makes vLLM generate every token asked for, as the random model does, so both decode
the same number of tokens through the same architecture; generated tokens are counted, not assumed.
Each batch runs once untimed (warm-up) and once timed; wall time includes the prefill and HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def random_prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    import torch

    generator = torch.Generator().manual_seed(batch)  # as bench/engine_gpu_bench.py
    return torch.randint(100, vocab - 100, (batch, length), generator=generator).tolist()


async def timed(backend: Any, prompts: list[list[int]], tokens: int) -> dict[str, float]:
    from agentr1.core.generation import GenerateRequest, SamplingParams

    requests = [GenerateRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=i))
                for i, p in enumerate(prompts)]
    started = time.perf_counter()
    results = await asyncio.gather(*(backend.generate(r) for r in requests))
    wall = time.perf_counter() - started
    generated = sum(len(r.output_ids) for r in results)
    return {"wall_s": wall, "tokens": generated, "tokens_per_s": generated / wall}


async def run(args: argparse.Namespace) -> None:
    from agentr1.gateway.backends.vllm import VLLMBackend

    backend = VLLMBackend(args.url, extra_body={"ignore_eos": True}, timeout=600)
    await backend.start()
    try:
        for batch in args.batches:
            prompts = random_prompts(batch, args.prompt, args.vocab)
            await timed(backend, prompts, args.tokens)  # warm-up
            row = {"engine": f"vLLM 0.25.0 server ({args.mode}) via the vllm backend", "batch": batch,
                   **await timed(backend, prompts, args.tokens)}
            print(json.dumps(row), flush=True)
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    finally:
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128, 256])
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--mode", default="compiled", help="how the server was started (recorded in each row)")
    args = parser.parse_args()
    for part in ("core", "gateway"):
        sys.path.insert(0, str(ROOT / part))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
