"""Gateway benchmarks, each a ratio against a baseline measured in the same run.

    .venv/bin/python bench/gateway_bench.py            # all parts, ~3-5 minutes on 2 cores
    .venv/bin/python bench/gateway_bench.py --parts a c

(a) overhead per call: the gateway over HTTP versus calling the same backend directly in-process,
    p50/p99, at 1 and 64 concurrent sessions, with the instant backend and the local engine
    (tiny random model; --engine-model smollm2 for the real one);
(b) gateway CPU time per call at turn 1 versus turn 64 of one growing conversation;
(c) steps per second captured and persisted with the instant backend, SQLite and PostgreSQL,
    checking that every answered call is in the store;
(d) local engine tokens/s at 1 versus 32 concurrent sessions through the gateway;
(e) overhead per call of each wire format, chat vs Responses vs Anthropic Messages, against the same
    instant backend in the same run (bench/gateway_apis.py).

The gateway runs in its own process (bench/gateway_server.py), so the load generator's CPU is
not billed to it; on this 2-core machine the two still share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from gateway_apis import add_arguments, part_e  # noqa: E402
from gateway_server import start_server  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _gateway_calls(url: str, sessions: int, turns: int, max_tokens: int) -> list[float]:
    """``sessions`` concurrent agents, each ``turns`` calls in its own session; latencies in ms."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=sessions + 8, max_keepalive_connections=sessions + 8)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def agent(i: int) -> None:
            s = (await client.post(f"{url}/sessions", json={"task_id": f"b{i}"})).json()
            messages = [{"role": "user", "content": f"agent {i}: what is 2+2?"}]
            for _ in range(turns):
                t0 = time.perf_counter()
                r = await client.post(f"{s['base_url']}/chat/completions", json={
                    "model": "bench", "messages": messages, "max_tokens": max_tokens, "temperature": 0})
                latencies.append((time.perf_counter() - t0) * 1000)
                r.raise_for_status()
                messages += [r.json()["choices"][0]["message"], {"role": "user", "content": "and again?"}]

        await asyncio.gather(*(agent(i) for i in range(sessions)))
    return latencies


async def _direct_calls(backend: Any, renderer: Any, sessions: int, turns: int, max_tokens: int) -> list[float]:
    from agentr1.core.generation import GenerateRequest, SamplingParams

    latencies: list[float] = []

    async def agent(i: int) -> None:
        ids = renderer.render([{"role": "user", "content": f"agent {i}: what is 2+2?"}])
        for _ in range(turns):
            t0 = time.perf_counter()
            await backend.generate(GenerateRequest(ids, SamplingParams(max_new_tokens=max_tokens, temperature=0)))
            latencies.append((time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(agent(i) for i in range(sessions)))
    return latencies


def _in_process_backend(kind: str, model: str) -> tuple[Any, Any]:
    from agentr1.core.models import resolve_model
    from agentr1.core.rendering import load_renderer
    from agentr1.engine import EngineOptions
    from agentr1.gateway import GatewaySettings
    from agentr1.gateway.backends import build_backend
    from agentr1.gateway.backends.instant import InstantBackend

    path = resolve_model(model)
    renderer = load_renderer(path)
    if kind == "instant":
        return InstantBackend(renderer.tokenizer, "4", model_name="bench"), renderer
    # the backend `agentr1 gateway --model M --engine-device cpu` serves (the same factory)
    return build_backend(GatewaySettings(model=str(path), engine=EngineOptions(device="cpu"),
                                         served_model_name="bench")), renderer


def part_a(args: argparse.Namespace, tmp: Path) -> list[str]:
    rows = ["| backend | sessions | direct p50 ms | gateway p50 ms | direct p99 ms | gateway p99 ms | "
            "overhead p50 ms | overhead p99 ms |", "|---|---|---|---|---|---|---|---|"]
    for kind, model, max_tokens, turns in (("instant", "tiny", 16, 20), ("local", args.engine_model, 8, 3)):
        backend, renderer = _in_process_backend(kind, model)

        async def direct(n: int, backend: Any = backend, renderer: Any = renderer,
                         turns: int = turns, max_tokens: int = max_tokens) -> list[float]:
            await backend.start()
            try:
                return await _direct_calls(backend, renderer, n, turns, max_tokens)
            finally:
                await backend.close()

        for n in (1, 64):
            d = asyncio.run(direct(n))
            with start_server(kind=kind, model=model, db=f"sqlite:///{tmp}/a-{kind}-{n}.db") as url:
                g = asyncio.run(_gateway_calls(url.url, n, turns, max_tokens))
            rows.append(f"| {kind} ({model}) | {n} | {pct(d, .5):.2f} | {pct(g, .5):.2f} | {pct(d, .99):.2f} | "
                        f"{pct(g, .99):.2f} | {pct(g, .5) - pct(d, .5):.2f} | {pct(g, .99) - pct(d, .99):.2f} |")
            print(rows[-1], flush=True)
    return rows


def part_b(args: argparse.Namespace, tmp: Path) -> list[str]:
    """CPU seconds the gateway process spends per call, by turn of one conversation."""
    with start_server(kind="instant", model="tiny", db=f"sqlite:///{tmp}/b.db") as server:
        url, proc = server.url, psutil.Process(server.pid)
        per_turn: dict[int, list[float]] = {}
        with httpx.Client(timeout=60) as client:
            for rep in range(args.b_reps):
                s = client.post(f"{url}/sessions", json={}).json()
                messages = [{"role": "user", "content": f"conversation {rep}: let us talk."}]
                for turn in range(1, 65):
                    before = sum(proc.cpu_times()[:2])
                    r = client.post(f"{s['base_url']}/chat/completions",
                                    json={"model": "bench", "messages": messages, "max_tokens": 16})
                    per_turn.setdefault(turn, []).append(sum(proc.cpu_times()[:2]) - before)
                    messages += [r.json()["choices"][0]["message"],
                                 {"role": "user", "content": f"turn {turn}: tell me a little more please."}]
    t1, t64 = statistics.mean(per_turn[1]), statistics.mean(per_turn[64])
    mid = statistics.mean(v for t in range(2, 9) for v in per_turn[t])
    late = statistics.mean(v for t in range(57, 65) for v in per_turn[t])
    return ["| measure | turn 1 | turns 2-8 | turns 57-64 | turn 64 | ratio late / early |", "|---|---|---|---|---|---|",
            f"| gateway CPU ms per call | {t1 * 1000:.2f} | {mid * 1000:.2f} | {late * 1000:.2f} | {t64 * 1000:.2f} "
            f"| {late / mid:.2f} |"]


def _pg_database() -> tuple[str, Any]:
    import sqlalchemy as sa

    name = f"agentr1_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return f"postgresql://postgres@127.0.0.1:5432/{name}", drop


def part_c(args: argparse.Namespace, tmp: Path) -> list[str]:
    from agentr1.store import TraceStore

    rows = ["| database | writes | sessions x turns | answered | stored | seconds | steps/s |", "|---|---|---|---|---|---|---|"]
    with start_server(kind="floor", model="tiny", db="unused") as server:
        t0 = time.perf_counter()
        lat = asyncio.run(_gateway_calls(server.url, args.c_sessions, args.c_turns, 4))
        floor = len(lat) / (time.perf_counter() - t0)
    rows.append(f"| HTTP floor (FastAPI echo, no store) | - | {args.c_sessions} x {args.c_turns} | {len(lat)} | 0 | "
                f"{len(lat) / floor:.1f} | {floor:.0f} |")
    print(rows[-1], flush=True)
    pg_url, drop = _pg_database()
    try:
        for label, db in (("SQLite", f"sqlite:///{tmp}/c.db"), ("PostgreSQL", pg_url)):
            for durable in (True, False):
                with start_server(kind="instant", model="tiny", db=db, durable=durable) as server:
                    t0 = time.perf_counter()
                    lat = asyncio.run(_gateway_calls(server.url, args.c_sessions, args.c_turns, 4))
                    elapsed = time.perf_counter() - t0
                with TraceStore.open(db) as store:
                    stored = sum(s.n_steps for s in store.list_sessions(None, limit=10**6))
                    store.engine.dispose()
                rows.append(f"| {label} | {'durable' if durable else 'fast'} | {args.c_sessions} x {args.c_turns} | "
                            f"{len(lat)} | {stored} | {elapsed:.1f} | {len(lat) / elapsed:.0f} |")
                print(rows[-1], flush=True)
                if db.startswith("sqlite"):
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{tmp}/c.db{suffix}").unlink(missing_ok=True)
                else:
                    with TraceStore.open(db) as store, store.engine.begin() as conn:
                        conn.exec_driver_sql("TRUNCATE steps, rewards, sessions, runs CASCADE")
    finally:
        drop()
    return rows


def part_d(args: argparse.Namespace, tmp: Path) -> list[str]:
    rows = ["| model | concurrent sessions | completion tokens | seconds | tokens/s |", "|---|---|---|---|---|"]
    rates = []
    for n in (1, 32):
        with start_server(kind="local", model=args.engine_model, db=f"sqlite:///{tmp}/d-{n}.db") as server:
            asyncio.run(_gateway_calls(server.url, 1, 1, 4))  # warm up
            t0 = time.perf_counter()
            tokens = asyncio.run(_count_tokens(server.url, n, args.d_tokens))
            elapsed = time.perf_counter() - t0
        rates.append(tokens / elapsed)
        rows.append(f"| {args.engine_model} | {n} | {tokens} | {elapsed:.1f} | {tokens / elapsed:.1f} |")
        print(rows[-1], flush=True)
    rows.append(f"\nbatching speed-up 32 vs 1: {rates[1] / rates[0]:.1f}x")
    return rows


async def _count_tokens(url: str, n: int, max_tokens: int) -> int:
    async with httpx.AsyncClient(timeout=600) as client:

        async def one(i: int) -> int:
            r = await client.post(f"{url}/v1/chat/completions", json={
                "model": "bench", "messages": [{"role": "user", "content": f"Write a story about robot {i}."}],
                "max_tokens": max_tokens, "temperature": 1.0, "seed": i, "stop_token_ids": []})
            return int(r.json()["usage"]["completion_tokens"])

        return sum(await asyncio.gather(*(one(i) for i in range(n))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="*", default=["a", "b", "c", "d"])
    parser.add_argument("--engine-model", default="tiny", help="model of the local engine in (a) and (d)")
    parser.add_argument("--b-reps", type=int, default=3)
    parser.add_argument("--c-sessions", type=int, default=64)
    parser.add_argument("--c-turns", type=int, default=20)
    parser.add_argument("--d-tokens", type=int, default=32)
    add_arguments(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tmp = Path(f"/tmp/agentr1-bench-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    parts = {"a": part_a, "b": part_b, "c": part_c, "d": part_d, "e": part_e}
    titles = {"a": "(a) overhead per call", "b": "(b) CPU per call vs conversation length",
              "c": "(c) steps captured and persisted per second (instant backend)",
              "d": "(d) local engine tokens/s through the gateway",
              "e": "(e) overhead per call by API: chat, Responses, Anthropic Messages (instant backend)"}
    for p in args.parts:
        print(f"\n### {titles[p]}\n", flush=True)
        print("\n".join(parts[p](args, tmp)), flush=True)
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
