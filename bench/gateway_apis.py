"""Part (e) of bench/gateway_bench.py: the per-call overhead of each wire format the gateway speaks.

    .venv/bin/python bench/gateway_bench.py --parts e

One gateway process (bench/gateway_server.py, the instant backend answering "4" with the tiny model's
tokenizer, SQLite) serves all three routes in the same run: ``/v1/chat/completions``, ``/v1/responses`` and
``/v1/messages``. Each agent holds a multi-turn conversation in its own session, in its API's own format (the
assistant's answer appended as that API returns it, then the next user turn), so every call goes through the
codec's decoding, the continuation planning, the step record and the codec's encoding. The APIs take turns
in rounds (the order rotates each round), so a change of machine load hits all three alike.

Reported per API: client latency p50 / p99 minus the direct backend call (the added latency), and the
gateway process's CPU milliseconds per call (user + system, from psutil: on a shared machine the steadier
of the two), each with its ratio to chat; then the CPU per call of the whole call path run in-process
(TestClient, ``time.process_time``), at 8 and 32 turns: the measure other load on the machine moves least.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from gateway_server import start_server

APIS = ("chat", "responses", "messages")
Message = dict[str, Any]


def _chat(base: str, messages: list[Message], max_tokens: int) -> tuple[str, Message]:
    return f"{base}/chat/completions", {"model": "bench", "messages": messages, "max_tokens": max_tokens,
                                        "temperature": 0}


def _responses(base: str, messages: list[Message], max_tokens: int) -> tuple[str, Message]:
    return f"{base}/responses", {"model": "bench", "input": messages, "max_output_tokens": max_tokens,
                                 "temperature": 0}


def _messages(base: str, messages: list[Message], max_tokens: int) -> tuple[str, Message]:
    return f"{base}/messages", {"model": "bench", "messages": messages, "max_tokens": max_tokens, "temperature": 0}


def _answer(api: str, body: Message) -> list[Message]:
    """The assistant's turn as the agent appends it to its history, in its API's own format."""
    if api == "chat":
        return [body["choices"][0]["message"]]
    if api == "responses":
        return list(body["output"])  # output items go back into `input` as they are
    return [{"role": "assistant", "content": body["content"]}]


REQUEST: dict[str, Callable[[str, list[Message], int], tuple[str, Message]]] = {
    "chat": _chat, "responses": _responses, "messages": _messages}


async def _conversations(client: httpx.AsyncClient, url: str, api: str, sessions: int, turns: int,
                         max_tokens: int) -> list[float]:
    """``sessions`` concurrent agents speaking ``api``, ``turns`` calls each; latencies in ms."""
    latencies: list[float] = []

    async def agent(i: int) -> None:
        s = (await client.post(f"{url}/sessions", json={"task_id": f"{api}{i}"})).json()
        history: list[Message] = [{"role": "user", "content": f"agent {i}: what is 2+2?"}]
        for turn in range(turns):
            route, body = REQUEST[api](s["base_url"], history, max_tokens)
            t0 = time.perf_counter()
            r = await client.post(route, json=body)
            latencies.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            history += [*_answer(api, r.json()), {"role": "user", "content": f"turn {turn}: and again?"}]

    await asyncio.gather(*(agent(i) for i in range(sessions)))
    return latencies


async def _rounds(url: str, pid: int, sessions: int, turns: int, rounds: int,
                  max_tokens: int) -> dict[str, tuple[list[float], list[float]]]:
    """api -> (latencies ms, gateway CPU ms of each round): psutil counts CPU in clock ticks (10 ms), so
    the per-call figure is the total over all rounds divided by the calls."""
    proc = psutil.Process(pid)
    out: dict[str, tuple[list[float], list[float]]] = {api: ([], []) for api in APIS}
    limits = httpx.Limits(max_connections=sessions + 8, max_keepalive_connections=sessions + 8)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        for api in APIS:  # warm-up: imports, first renders, connection pool
            await _conversations(client, url, api, 1, 2, max_tokens)
        for k in range(rounds):
            for api in APIS[k % 3:] + APIS[:k % 3]:
                before = sum(proc.cpu_times()[:2])
                lat = await _conversations(client, url, api, sessions, turns, max_tokens)
                cpu = (sum(proc.cpu_times()[:2]) - before) * 1000
                out[api][0].extend(lat)
                out[api][1].append(cpu)
    return out


async def _direct_p50(renderer: Any, backend: Any, calls: int, max_tokens: int) -> tuple[float, float]:
    from agentr1.core.generation import GenerateRequest, SamplingParams

    ids = renderer.render([{"role": "user", "content": "agent 0: what is 2+2?"}])
    latencies = []
    await backend.start()
    try:
        for _ in range(calls):
            t0 = time.perf_counter()
            await backend.generate(GenerateRequest(ids, SamplingParams(max_new_tokens=max_tokens, temperature=0)))
            latencies.append((time.perf_counter() - t0) * 1000)
    finally:
        await backend.close()
    return _pct(latencies, .5), _pct(latencies, .99)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def part_e(args: argparse.Namespace, tmp: Path) -> list[str]:
    from agentr1.core.models import resolve_model
    from agentr1.core.rendering import load_renderer
    from agentr1.gateway.backends.instant import InstantBackend

    renderer = load_renderer(resolve_model("tiny"))
    direct50, direct99 = asyncio.run(_direct_p50(renderer, InstantBackend(renderer.tokenizer, "4", model_name="bench"),
                                                 200, 16))
    rows = [f"direct backend call: p50 {direct50:.3f} ms, p99 {direct99:.3f} ms (subtracted below)\n",
            "| API | sessions | calls | added p50 ms | added p99 ms | p50 / chat | gateway CPU ms per call "
            "| CPU / chat |", "|---|---|---|---|---|---|---|---|"]
    for sessions in args.e_sessions:
        with start_server(kind="instant", model="tiny", db=f"sqlite:///{tmp}/e-{sessions}.db") as server:
            result = asyncio.run(_rounds(server.url, server.pid, sessions, args.e_turns, args.e_rounds, 16))
        chat50 = _pct(result["chat"][0], .5) - direct50
        chat_cpu = sum(result["chat"][1]) / len(result["chat"][0])
        for api in APIS:
            lat, cpu_per_round = result[api]
            added50, added99 = _pct(lat, .5) - direct50, _pct(lat, .99) - direct99
            cpu = sum(cpu_per_round) / len(lat)
            rows.append(f"| {api} | {sessions} | {len(lat)} | {added50:.2f} | {added99:.2f} | {added50 / chat50:.3f} "
                        f"| {cpu:.2f} | {cpu / chat_cpu:.3f} |")
            print(rows[-1], flush=True)
    print("\nin-process CPU per call (no sockets, this process only):\n", flush=True)
    rows += ["\nin-process CPU per call (no sockets, this process only):\n", *part_e_cpu(args, tmp)]
    return rows


def _in_process_cpu(tmp: Path, turns: int, rounds: int) -> dict[str, list[float]]:
    """api -> the CPU ms of each of its calls, the whole gateway run in this process (the app driven through
    Starlette's TestClient, no sockets, durable writes: a call returns after its commit). The three APIs go
    in lockstep, one call each per turn in a rotating order, so a change of load hits the three alike;
    ``time.process_time`` counts this process only. Includes the client's JSON work, alike for the three."""
    from starlette.testclient import TestClient

    from gateway_server import gateway_app

    app, _ = gateway_app("instant", "tiny", f"sqlite:///{tmp}/e-cpu-{turns}.db")
    cpu: dict[str, list[float]] = {api: [] for api in APIS}
    with TestClient(app) as client:
        for k in range(rounds + 1):  # round 0 warms up
            state = {}
            for api in APIS:
                base = client.post("/sessions", json={"task_id": api}).json()["base_url"].split("/sessions/", 1)[1]
                state[api] = (f"/sessions/{base}", [{"role": "user", "content": f"{api} {k}: what is 2+2?"}])
            for turn in range(turns):
                for api in APIS[(k + turn) % 3:] + APIS[:(k + turn) % 3]:
                    base, history = state[api]
                    route, body = REQUEST[api](base, history, 16)
                    t0 = time.process_time()
                    r = client.post(route, json=body)
                    spent = (time.process_time() - t0) * 1000
                    r.raise_for_status()
                    history += [*_answer(api, r.json()), {"role": "user", "content": f"turn {turn}: and again?"}]
                    if k:
                        cpu[api].append(spent)
    return cpu


def _ratios(cpu: dict[str, list[float]], api: str) -> str:
    """mean, median and median paired ratio of ``api``'s CPU per call to chat's (calls of one turn paired)."""
    chat = cpu["chat"]
    paired = statistics.median(a / c for a, c in zip(cpu[api], chat, strict=True))
    return (f"{statistics.fmean(cpu[api]) / statistics.fmean(chat):.3f}, "
            f"{statistics.median(cpu[api]) / statistics.median(chat):.3f}, {paired:.3f}")


def part_e_cpu(args: argparse.Namespace, tmp: Path) -> list[str]:
    """Each API's CPU per call against chat's: the mean, the median, and the median of the paired ratios
    (the calls of one turn run back to back, so each pair shares the machine's state of that moment: the
    figure other load, garbage collections and scheduling move least)."""
    rows = ["| turns per conversation | calls per API | chat CPU ms per call (mean / median) | responses | messages "
            "| responses / chat (mean, median, paired) | messages / chat (mean, median, paired) |",
            "|---|---|---|---|---|---|---|"]
    print("\n".join(rows), flush=True)
    for turns in args.e_cpu_turns:
        cpu = _in_process_cpu(tmp, turns, args.e_cpu_rounds)
        cells = " | ".join(f"{statistics.fmean(cpu[api]):.2f} / {statistics.median(cpu[api]):.2f}" for api in APIS)
        rows.append(f"| {turns} | {len(cpu['chat'])} | {cells} | {_ratios(cpu, 'responses')} | "
                    f"{_ratios(cpu, 'messages')} |")
        print(rows[-1], flush=True)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--e-sessions", type=int, nargs="*", default=[1, 16],
                        help="concurrent sessions per API in (e)")
    parser.add_argument("--e-turns", type=int, default=8, help="turns per conversation in (e)")
    parser.add_argument("--e-rounds", type=int, default=12, help="rounds of the three APIs in (e)")
    parser.add_argument("--e-cpu-turns", type=int, nargs="*", default=[8, 32],
                        help="conversation lengths of (e)'s in-process CPU measure")
    parser.add_argument("--e-cpu-rounds", type=int, default=20, help="conversations per API in that measure")
