"""Rollout backends side by side on one GPU: decode speed of SGLang, vLLM and the embedded engine on the same
model and the same requests, and what the gateway adds in front of a server.

    python3 bench/serving_bench.py decode --backend sglang --url http://127.0.0.1:30000 --label "SGLang 0.5.17" \
        --out rows.jsonl [--batches 1 32 128]
    python3 bench/serving_bench.py decode --backend local --model DIR --label "agentr1 local" --out rows.jsonl
    python3 bench/serving_bench.py gateway --backend sglang --url URL --tokenizer DIR --out rows.jsonl \
        [--sessions 1 64 128] [--turns 4]

decode: per batch, that many random 300-token prompts (the seeded generator of bench/engine_gpu_bench.py) submitted
together through the backend's ``generate``, 64 new tokens each at temperature 1, one seed per request; once
untimed (warm-up, graph capture), once timed. The servers get ``ignore_eos`` so that every request decodes all 64
tokens; the embedded engine has no such switch and is given a model of the same shape with random weights (which
almost never samples an end token): same architecture, same token counts. Generated tokens are counted, not
assumed; wall time includes the prefill and, for the servers, HTTP.

gateway: ``--sessions`` agents at once, each a multi-turn chat of ``--turns`` calls (``/sessions``, then
``/chat/completions`` through the gateway in front of the server, the conversation growing by the answer and a
short user turn, temperature 1, ``max_tokens`` 32). Then the same work straight to the server: every stored step's
observation ids replayed through the backend with ``max_new_tokens`` = its action's length and ``ignore_eos``, the
sessions' calls in the same order and concurrency. The row gives both walls and per-call latencies (p50, p90) and
the gateway's added milliseconds per call (its p50 minus the direct p50). Every call must be stored: the row
counts the steps in the store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentr1.core.generation import GenerateRequest, SamplingParams  # noqa: E402


def random_prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    import torch

    generator = torch.Generator().manual_seed(batch)  # as bench/engine_gpu_bench.py
    return torch.randint(100, vocab - 100, (batch, length), generator=generator).tolist()


def build_backend(args: argparse.Namespace, *, ignore_eos: bool = True) -> Any:
    """The backend under test: a server's (ignore_eos where asked) or the embedded engine on ``--model``."""
    ignore_eos = ignore_eos and args.ignore_eos
    if args.backend == "sglang":
        from agentr1.gateway.backends.sglang import SGLangBackend

        return SGLangBackend(args.url, tokenizer=args.tokenizer, timeout=600,
                             extra_sampling={"ignore_eos": True} if ignore_eos else None)
    if args.backend == "vllm":
        from agentr1.gateway.backends.vllm import VLLMBackend

        return VLLMBackend(args.url, tokenizer=args.tokenizer, timeout=600,
                           extra_body={"ignore_eos": True} if ignore_eos else None)
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend

    return LocalBackend(args.model, EngineOptions(device="cuda", dtype="bfloat16", max_batch_size=max(args.batches)))


async def timed(backend: Any, prompts: list[list[int]], tokens: int) -> dict[str, float]:
    requests = [GenerateRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=i))
                for i, p in enumerate(prompts)]
    started = time.perf_counter()
    results = await asyncio.gather(*(backend.generate(r) for r in requests))
    wall = time.perf_counter() - started
    generated = sum(len(r.output_ids) for r in results)
    return {"wall_s": round(wall, 4), "tokens": generated, "tokens_per_s": round(generated / wall, 1)}


async def decode(args: argparse.Namespace) -> None:
    backend = build_backend(args)
    await backend.start()
    try:
        for batch in args.batches:
            prompts = random_prompts(batch, args.prompt, args.vocab)
            await timed(backend, prompts, args.tokens)  # warm-up
            record(args.out, {"bench": "decode", "backend": args.backend, "label": args.label, "batch": batch,
                              "prompt_tokens": args.prompt, "new_tokens": args.tokens,
                              **await timed(backend, prompts, args.tokens)})
    finally:
        await backend.close()


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 2), "p90": round(ordered[math.ceil(0.9 * len(ordered)) - 1], 2)}


async def agent(client: Any, gateway: str, name: str, turns: int, latencies: list[float]) -> None:
    """One multi-turn chat through the gateway; appends each call's milliseconds."""
    session = (await client.post(f"{gateway}/sessions", json={"task_id": name})).json()
    headers = {"Authorization": f"Bearer {session['api_key']}"}
    messages = [{"role": "user", "content": f"Tell me a short story about the number {name}."}]
    for turn in range(turns):
        started = time.perf_counter()
        r = await client.post(f"{session['base_url']}/chat/completions", headers=headers, json={
            "model": "policy", "messages": messages, "max_tokens": 32, "temperature": 1.0, "seed": turn})
        latencies.append((time.perf_counter() - started) * 1000)
        r.raise_for_status()
        messages += [r.json()["choices"][0]["message"], {"role": "user", "content": "Go on."}]


async def direct(backend: Any, chains: list[list[Any]], latencies: list[float]) -> None:
    """The stored steps' work straight to the server: each chain's calls in order, the chains at once."""

    async def chain(steps: list[Any]) -> None:
        for step in steps:
            request = GenerateRequest(prompt_ids=list(step.observation_ids), sampling=SamplingParams(
                max_new_tokens=max(1, len(step.action_ids)), temperature=1.0, seed=step.index))
            started = time.perf_counter()
            await backend.generate(request)
            latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(chain(steps) for steps in chains))


async def gateway_rows(args: argparse.Namespace) -> None:
    import httpx

    from agentr1.gateway.app import create_app
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import GatewaySettings
    from agentr1.store import TraceStore

    for sessions in args.sessions:
        with tempfile.TemporaryDirectory() as tmp:
            db = str(Path(tmp) / "bench.db")
            store = TraceStore.open(db)
            backend = build_backend(args, ignore_eos=False)
            app = create_app(GatewaySettings(db=db, accept_any_model=True), store=store, backend=backend)
            via: list[float] = []
            with BackgroundServer(app) as gateway:
                limits = httpx.Limits(max_connections=sessions + 8, max_keepalive_connections=sessions + 8)
                async with httpx.AsyncClient(timeout=600, limits=limits) as client:
                    started = time.perf_counter()
                    await asyncio.gather(*(agent(client, gateway, str(i), args.turns, via) for i in range(sessions)))
                    wall_gateway = time.perf_counter() - started
            chains = [store.get_session(s.id).steps for s in store.list_sessions(limit=sessions + 10)]
            stored = sum(len(c) for c in chains)
            store.close()
            plain = build_backend(args)  # ignore_eos: each replay decodes as many tokens as the stored action
            await plain.start()
            straight: list[float] = []
            try:
                started = time.perf_counter()
                await direct(plain, chains, straight)
                wall_direct = time.perf_counter() - started
            finally:
                await plain.close()
            through, alone = percentiles(via), percentiles(straight)
            record(args.out, {
                "bench": "gateway", "backend": args.backend, "label": args.label, "sessions": sessions,
                "turns": args.turns, "calls": len(via), "stored_steps": stored,
                "wall_gateway_s": round(wall_gateway, 3), "wall_direct_s": round(wall_direct, 3),
                "calls_per_s_gateway": round(len(via) / wall_gateway, 1),
                "latency_gateway_ms": through, "latency_direct_ms": alone,
                "added_p50_ms": round(through["p50"] - alone["p50"], 2)})


def record(out: Path, row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["decode", "gateway"])
    parser.add_argument("--backend", choices=["sglang", "vllm", "local"], required=True)
    parser.add_argument("--url", help="the server's base URL (sglang, vllm)")
    parser.add_argument("--model", help="the embedded engine's model directory (local)")
    parser.add_argument("--tokenizer", help="the served model's directory (the gateway renders with it)")
    parser.add_argument("--label", default="", help="what was measured (recorded in each row)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151_000, help="prompt ids are drawn below this (Qwen2.5: 151,643)")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 64, 128])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                        help="servers stop at end tokens (a dry run against tests/backends/fake_sglang.py, which has "
                             "no ignore_eos)")
    args = parser.parse_args()
    if args.backend == "local" and not args.model:
        parser.error("--backend local needs --model")
    if args.backend != "local" and not args.url:
        parser.error(f"--backend {args.backend} needs --url")
    asyncio.run(decode(args) if args.part == "decode" else gateway_rows(args))


if __name__ == "__main__":
    main()
