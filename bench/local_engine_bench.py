"""Local engine throughput: generated tokens per second at 1 and N concurrent requests.

    .venv/bin/python bench/local_engine_bench.py                       # SmolLM2, 1 and 8 concurrent
    .venv/bin/python bench/local_engine_bench.py --model tiny --concurrency 1 4 16
    .venv/bin/python bench/local_engine_bench.py --tokens 64 --device cuda --concurrency 1 32 128

Each request is a chat prompt of its own, sampled at temperature 1 with a seed, up to --tokens new
tokens (it may stop earlier at <|im_end|>; only generated tokens count). Prints a markdown table:
wall time, total tokens/s, per-request tokens/s (with --baseline, plain HF ``model.generate`` on
the same prompts too, forced to --tokens new tokens), the forward passes the engine ran, the CPU
seconds this process used and the machine's load average when the run began (on a shared
machine, a load above the core count means the numbers are lower bounds).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import time

import torch

from agentr1.core.models import resolve_model
from agentr1.gateway.backends import GenerateRequest, SamplingParams
from agentr1.gateway.backends.local import LocalBackend

QUESTIONS = [
    "Explain why the sky is blue.",
    "Write a short poem about the sea.",
    "What is 12*7? Show your steps.",
    "List three uses of a paperclip.",
    "Describe a cat to someone who has never seen one.",
    "How do I boil an egg?",
    "Summarise the plot of a fairy tale.",
    "Give advice for a first job interview.",
]


def prompts(backend: LocalBackend, concurrency: int) -> list[list[int]]:
    out = []
    for i in range(concurrency):
        text = QUESTIONS[i % len(QUESTIONS)] + (f" (variant {i})" if i >= len(QUESTIONS) else "")
        out.append(
            backend.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
    return out


def hf_generate(backend: LocalBackend, concurrency: int, tokens: int) -> dict[str, float]:
    """The baseline: one plain ``model.generate`` call on the same prompts (left-padded batch)."""
    batch = prompts(backend, concurrency)
    width = max(len(p) for p in batch)
    pad = backend.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=backend.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=backend.device)
    load = os.getloadavg()[0]
    cpu, started = time.process_time(), time.perf_counter()
    with torch.inference_mode():
        backend.model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
        )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    generated = concurrency * tokens
    return {
        "wall_s": wall,
        "tokens": generated,
        "tokens_per_s": generated / wall,
        "per_request_tokens_per_s": generated / concurrency / wall,
        "forwards": tokens,
        "cpu_s": cpu,
        "load": load,
    }


async def measure(backend: LocalBackend, concurrency: int, tokens: int) -> dict[str, float]:
    requests = [
        GenerateRequest(prompt_ids=ids, sampling=SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=i))
        for i, ids in enumerate(prompts(backend, concurrency))
    ]
    before = dataclasses.replace(backend.stats)
    load = os.getloadavg()[0]
    cpu, started = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(backend.generate(r) for r in requests))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    generated = sum(len(r.output_ids) for r in results)
    return {
        "wall_s": wall,
        "tokens": generated,
        "tokens_per_s": generated / wall,
        "per_request_tokens_per_s": generated / concurrency / wall,
        "forwards": backend.stats.forward_passes - before.forward_passes,
        "cpu_s": cpu,
        "load": load,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a HF model directory")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeat", type=int, default=1, help="runs per concurrency level (best is shown)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--baseline", action="store_true", help="also time plain HF model.generate")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # for the baseline; the engine's worker sets its own

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    backend = LocalBackend(
        resolve_model(args.model),
        device=args.device,
        max_batch_size=max(args.concurrency),
        num_threads=args.threads or None,
    )
    loaded = time.perf_counter()
    await backend.start()
    print(
        f"model {backend.model_name} on {backend.device} ({backend.dtype}), loaded in "
        f"{time.perf_counter() - loaded:.1f} s; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}"
    )
    await measure(backend, 1, 4)  # warm-up
    print(
        "\n| engine | concurrent | tokens | wall s | tokens/s total | tokens/s per request | forwards | CPU s | load |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for concurrency in args.concurrency:
        rows = {"local": [await measure(backend, concurrency, args.tokens) for _ in range(args.repeat)]}
        if args.baseline:
            rows["hf generate"] = [hf_generate(backend, concurrency, args.tokens) for _ in range(args.repeat)]
        for engine, runs in rows.items():
            best = max(runs, key=lambda r: r["tokens_per_s"])
            print(
                f"| {engine} | {concurrency} | {best['tokens']} | {best['wall_s']:.2f} | {best['tokens_per_s']:.1f} | "
                f"{best['per_request_tokens_per_s']:.1f} | {best['forwards']} | {best['cpu_s']:.1f} | "
                f"{best['load']:.1f} |"
            )
    await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
