"""agentr1's gateway side by side with its peers, in one run against one instant backend.

    .venv/bin/python bench/peer_bench.py                       # the defaults below, ~3 minutes
    .venv/bin/python bench/peer_bench.py --json /tmp/peers.json --only agentr1 rllm

One instant backend (bench/instant_vllm.py: answers at once in vLLM's chat and token-id
completion dialects) serves every gateway: agentr1 (``--backend vllm``, durable SQLite), the rLLM
model gateway 0.1.0 (SQLite store) and Agent Lightning 1.0.2 (in memory), each in its own process
(bench/peers.py says how each is started and read). The peers run from their own Python 3.12 venv
(``--peers-venv``, default ~/.cache/agentr1-peers), created here on first use:
``python3.12 -m venv ~/.cache/agentr1-peers && ~/.cache/agentr1-peers/bin/pip install
agentlightning==1.0.2 rllm-model-gateway==0.1.0``.

Each call is an 11-message (~290-token) chat prompt, the last message naming the session and the
call, ``max_tokens`` 32 (the backend's reply is 32 tokens). All gateways start first; each gets a
warm-up session; then ``--seq-sessions`` sessions of ``--calls`` calls one at a time, session by
session, each gateway in turn (latency p50/p99, calls/s at 1 session: calls over the time spent
in them); then ``--rounds`` rounds (3) of ``--sessions`` sessions x ``--calls`` calls concurrently, each
round running every gateway in turn in an order rotated from round to round (calls/s at 64
sessions: all the rounds' calls over their time; p50/p99 over all their calls).
Clients are plain ``httpx.AsyncClient`` pools (default keep-alive expiry, 5 s, as the OpenAI client),
sized to the sessions: one for the sequential phase, and one in each of ``--client-processes`` processes (4; the
sessions split between them, all starting at one moment) for the concurrent phase. One client process was the
default until 2026-12-05: it saturated its core (0.97 of a core at 145 calls/s in front of agentr1, 6.65 ms of client
CPU a call against 1.1 ms one call at a time), so calls/s at 64 sessions measured the client more than the gateways;
``--client-processes 1`` runs it that way. The clients' and the backend's CPU per call are reported beside the
gateway's. A call that fails (transport error, non-200 status, an answer
without text) is counted as a client-side error and the session goes on. After the load, the calls
each store holds for the measured sessions are counted (``stored``). The gateways' CPU time per
answered call (psutil, user + system) is reported too. "added" is gateway minus direct.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentr1.gateway.server import free_port
from peers import RLLM, ROOT, AgentLightning, AgentR1, Direct, Gateway, ensure_peers_venv, start_process, wait_ready

__all__ = ["PhaseResult", "conversation", "main", "run_phase"]

PAIRS = [
    ("You help customers of a small stationery shop. Answer in one or two short sentences, never invent stock "
     "numbers, and say plainly when you do not know. Prices are in euros and include VAT; the shop is open from "
     "nine to six on weekdays. How many blue notebooks are left?",
     "There are 14 blue A5 notebooks in stock and 3 more arrive on Friday."),
    ("And the red ones?", "Red A5 notebooks are sold out; the next delivery is not scheduled yet."),
    ("What does a box of black ink cartridges cost?", "A box of ten black cartridges costs 18.50 euros including VAT."),
    ("Is the shop open on Saturday?", "No, the shop is open from nine to six on weekdays only."),
    ("Can I reserve two desk lamps and a packet of A4 paper?",
     "Yes, I have reserved two desk lamps and one packet of A4 paper for you until Thursday evening."),
]


def conversation(session: str, call: int) -> list[dict[str, str]]:
    """The 11 messages of one call: five fixed exchanges, then a question naming the session and call."""
    messages = [{"role": r, "content": c} for u, a in PAIRS for r, c in (("user", u), ("assistant", a))]
    messages.append({"role": "user", "content": f"{session}, call {call}: please list what I have reserved so far, "
                                                f"with the total price, and tell me until when the reservation holds."})
    return messages


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@dataclass
class PhaseResult:
    sessions: int
    calls: int
    answered: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float | None = None
    client_cpu_s: float = 0.0  # this process (the clients) during the phase
    backend_cpu_s: float = 0.0  # the instant backend during the phase
    stored: int | None = None
    session_urls: list[str] = field(default_factory=list)

    @classmethod
    def merge(cls, parts: list[PhaseResult]) -> PhaseResult:
        """Phases run one after another as one: their calls, times and CPU added up."""
        merged = cls(sum(p.sessions for p in parts), sum(p.calls for p in parts))
        for p in parts:
            merged.answered += p.answered
            merged.latencies_ms += p.latencies_ms
            merged.errors += p.errors
            merged.wall_s += p.wall_s
            merged.session_urls += p.session_urls
            merged.client_cpu_s += p.client_cpu_s
            merged.backend_cpu_s += p.backend_cpu_s
            if p.cpu_s is not None:
                merged.cpu_s = (merged.cpu_s or 0.0) + p.cpu_s
        return merged

    def summary(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "calls": self.calls, "answered": self.answered, "errors": len(self.errors),
                "first_errors": self.errors[:5], "wall_s": round(self.wall_s, 2),
                "calls_per_s": round(self.answered / self.wall_s, 1) if self.wall_s else None,
                "p50_ms": round(pct(self.latencies_ms, 0.5), 2), "p99_ms": round(pct(self.latencies_ms, 0.99), 2),
                "cpu_ms_per_call": round(self.cpu_s * 1000 / self.answered, 2) if self.cpu_s and self.answered else None,
                "client_cpu_ms_per_call": round(self.client_cpu_s * 1000 / self.answered, 2) if self.answered else None,
                "backend_cpu_ms_per_call": round(self.backend_cpu_s * 1000 / self.answered, 2) if self.answered else None,
                "stored": self.stored}


BACKEND_PID: list[int] = []  # the instant backend's, once started (its CPU per call is reported beside the gateway's)


async def call_sessions(client: httpx.AsyncClient, urls: list[str], *, first: int, calls: int, max_tokens: int,
                        tag: str, concurrent: bool, result: PhaseResult) -> None:
    """``calls`` chat calls on each session of ``urls`` (named ``first``, ``first + 1``, ...): all sessions at once,
    or one call at a time; answers, latencies and errors go to ``result``."""

    async def session(i: int) -> None:
        for call in range(calls):
            body = {"model": "bench", "messages": conversation(f"{tag} session {first + i}", call),
                    "max_tokens": max_tokens, "temperature": 1.0}
            started = time.perf_counter()
            try:
                r = await client.post(f"{urls[i]}/chat/completions", json=body)
                elapsed = (time.perf_counter() - started) * 1000
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
                if not r.json()["choices"][0]["message"]["content"]:
                    raise RuntimeError("an answer without text")
            except Exception as exc:  # counted: the run goes on
                result.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            result.latencies_ms.append(elapsed)
            result.answered += 1

    if concurrent:
        await asyncio.gather(*(session(i) for i in range(len(urls))))
    else:
        for i in range(len(urls)):
            await session(i)


def client_process(urls: list[str], first: int, calls: int, max_tokens: int, tag: str,
                   start_at: float) -> tuple[dict[str, Any], float, float]:
    """One of ``--client-processes`` client processes of the concurrent phase: its sessions from ``start_at``
    (``time.time()``) on; returns its result's fields (its CPU seconds in ``client_cpu_s``; plain values, for the
    parent), when it started and when it ended."""

    async def run() -> tuple[dict[str, Any], float, float]:
        result = PhaseResult(len(urls), len(urls) * calls)
        limits = httpx.Limits(max_connections=len(urls) + 8, max_keepalive_connections=len(urls) + 8)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            began, cpu = time.time(), time.process_time()
            await call_sessions(client, urls, first=first, calls=calls, max_tokens=max_tokens, tag=tag,
                                concurrent=True, result=result)
            result.client_cpu_s = time.process_time() - cpu
        return dataclasses.asdict(result), began, time.time()

    return asyncio.run(run())


def cpu_s(proc: psutil.Process | None) -> float:
    return sum(proc.cpu_times()[:2]) if proc else 0.0


async def run_phase(gw: Gateway, *, sessions: int, calls: int, max_tokens: int, tag: str,
                    concurrent: bool, client_processes: int = 1) -> PhaseResult:
    """``sessions`` x ``calls`` chat calls on ``gw``: all sessions at once (from ``client_processes`` processes,
    the sessions split between them), or one call at a time."""
    result = PhaseResult(sessions, sessions * calls)
    limits = httpx.Limits(max_connections=sessions + 8, max_keepalive_connections=sessions + 8)
    proc = psutil.Process(gw.pid) if gw.pid else None
    backend = psutil.Process(BACKEND_PID[0]) if BACKEND_PID else None
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        urls = [await gw.open_session(client, f"{tag}-s{i}") for i in range(sessions)]
        result.session_urls = urls
        if concurrent and client_processes > 1:
            return await run_in_processes(result, proc, backend, client_processes, calls=calls,
                                          max_tokens=max_tokens, tag=tag)
        before = cpu_s(proc), cpu_s(psutil.Process()), cpu_s(backend)
        started = time.perf_counter()
        await call_sessions(client, urls, first=0, calls=calls, max_tokens=max_tokens, tag=tag,
                            concurrent=concurrent, result=result)
        result.wall_s = time.perf_counter() - started
        result.cpu_s = cpu_s(proc) - before[0] if proc else None
        result.client_cpu_s = cpu_s(psutil.Process()) - before[1]
        result.backend_cpu_s = cpu_s(backend) - before[2]
    return result


START_AFTER_S = 4.0  # the client processes start (spawn, imports) before the first call: all begin together


async def run_in_processes(result: PhaseResult, proc: psutil.Process | None, backend: psutil.Process | None,
                           processes: int, *, calls: int, max_tokens: int, tag: str) -> PhaseResult:
    """The concurrent phase from ``processes`` client processes (spawned), the sessions split between them in
    blocks; the wall time runs from their common start to the last one's end."""
    urls = result.session_urls
    blocks = [(k * len(urls) // processes, (k + 1) * len(urls) // processes) for k in range(processes)]
    start_at = time.time() + START_AFTER_S
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [loop.run_in_executor(pool, client_process, urls[a:b], a, calls, max_tokens, tag, start_at)
                   for a, b in blocks]
        await asyncio.sleep(max(0.0, start_at - time.time()))
        before = cpu_s(proc), cpu_s(backend)
        parts = await asyncio.gather(*futures)
        result.cpu_s = cpu_s(proc) - before[0] if proc else None
        result.backend_cpu_s = cpu_s(backend) - before[1]
    late = max(began for _, began, _ in parts) - start_at
    if late > 0.2:
        print(f"warning: a client process started {late:.2f} s late (START_AFTER_S)", flush=True)
    result.wall_s = max(ended for _, _, ended in parts) - start_at
    for part, _, _ in parts:
        result.answered += part["answered"]
        result.latencies_ms += part["latencies_ms"]
        result.errors += part["errors"]
        result.client_cpu_s += part["client_cpu_s"]
    return result


def start_backend(tmp: Path) -> tuple[str, Any]:
    port = free_port()
    proc = start_process([sys.executable, str(ROOT / "bench" / "instant_vllm.py"), "--port", str(port)],
                         cwd=tmp, log=tmp / "backend.log", env={"HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", proc)
    BACKEND_PID[:] = [proc.pid]
    return url, proc


def table(results: dict[str, dict[str, Any]], labels: dict[str, str], sessions: int) -> str:
    direct = results["direct"]
    rows = ["| gateway | added p50 ms (seq.) | added p99 ms (seq.) | calls/s at 1 session (vs direct) | "
            f"calls/s at {sessions} sessions (vs direct) | p50 / p99 ms at {sessions} | gateway CPU ms per call "
            f"(seq. / {sessions}) | client / backend CPU ms per call at {sessions} | "
            "stored / answered | client errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        seq, conc = r["sequential"], r["concurrent"]
        added = (f"{seq['p50_ms'] - direct['sequential']['p50_ms']:+.2f}",
                 f"{seq['p99_ms'] - direct['sequential']['p99_ms']:+.2f}") if name != "direct" else ("0", "0")
        ratio1 = seq["calls_per_s"] / direct["sequential"]["calls_per_s"]
        ratio64 = conc["calls_per_s"] / direct["concurrent"]["calls_per_s"]
        answered = seq["answered"] + conc["answered"]
        stored = "-" if seq["stored"] is None else f"{seq['stored'] + conc['stored']} / {answered}"
        cpu = "-" if seq["cpu_ms_per_call"] is None else f"{seq['cpu_ms_per_call']} / {conc['cpu_ms_per_call']}"
        rows.append(f"| {labels[name]} | {added[0]} | {added[1]} | {seq['calls_per_s']} ({ratio1:.2f}x) | "
                    f"{conc['calls_per_s']} ({ratio64:.2f}x) | {conc['p50_ms']} / {conc['p99_ms']} | {cpu} | "
                    f"{conc['client_cpu_ms_per_call']} / {conc['backend_cpu_ms_per_call']} | {stored} | "
                    f"{seq['errors'] + conc['errors']} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers-venv", type=Path, default=Path.home() / ".cache" / "agentr1-peers")
    parser.add_argument("--only", nargs="*", default=["rllm", "agl", "agentr1"], help="gateways (direct always runs)")
    parser.add_argument("--seq-sessions", type=int, default=25)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20, help="calls per session")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the concurrent phase (order rotated)")
    parser.add_argument("--client-processes", type=int, default=4,
                        help="client processes of the concurrent phase (1: this one, as before 2026-12-05)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    venv = ensure_peers_venv(args.peers_venv) if {"rllm", "agl"} & set(args.only) else args.peers_venv
    tmp = Path(f"/tmp/agentr1-peer-bench-{os.getpid()}")
    tmp.mkdir(parents=True)
    backend_url, backend = start_backend(tmp)
    kinds = {"direct": lambda: Direct(0, backend_url, tmp), "agentr1": lambda: AgentR1(free_port(), backend_url, tmp),
             "rllm": lambda: RLLM(free_port(), backend_url, tmp, venv),
             "agl": lambda: AgentLightning(free_port(), backend_url, tmp, venv)}
    gateways = [kinds[name]() for name in ["direct", *[n for n in ("rllm", "agl", "agentr1") if n in args.only]]]
    load = {"start": os.getloadavg()}
    results: dict[str, dict[str, Any]] = {}
    try:
        for gw in gateways:  # all up before the first measurement: one machine state for every gateway
            gw.start()
        for gw in gateways:
            asyncio.run(run_phase(gw, sessions=1, calls=5, max_tokens=args.max_tokens, tag="warmup", concurrent=False))
            results[gw.name] = {}
        # one at a time: session after session, each gateway in turn, so that the machine's load (other
        # jobs) changing during the run falls on every gateway alike
        sequential: dict[str, list[PhaseResult]] = {gw.name: [] for gw in gateways}
        for i in range(args.seq_sessions):
            for gw in gateways:
                sequential[gw.name].append(asyncio.run(run_phase(
                    gw, sessions=1, calls=args.calls, max_tokens=args.max_tokens, tag=f"{gw.name}-seq{i}",
                    concurrent=False)))
        for gw in gateways:
            r = PhaseResult.merge(sequential[gw.name])
            r.stored = gw.stored(r.session_urls)
            results[gw.name]["sequential"] = r.summary()
            print(f"{gw.name:8s} sequential {json.dumps(results[gw.name]['sequential'])}", flush=True)
        # 64 sessions at once, in --rounds rounds; each round runs every gateway in turn, the order rotated
        # from round to round, so that a load change during the run falls on every gateway alike
        concurrent: dict[str, list[PhaseResult]] = {gw.name: [] for gw in gateways}
        for k in range(args.rounds):
            shift = k % len(gateways)
            for gw in gateways[shift:] + gateways[:shift]:
                concurrent[gw.name].append(asyncio.run(run_phase(
                    gw, sessions=args.sessions, calls=args.calls, max_tokens=args.max_tokens,
                    tag=f"{gw.name}-concurrent{k}", concurrent=True, client_processes=args.client_processes)))
        for gw in gateways:
            r = PhaseResult.merge(concurrent[gw.name])
            r.sessions = args.sessions  # per round
            r.stored = gw.stored(r.session_urls)
            results[gw.name]["concurrent"] = r.summary()
            print(f"{gw.name:8s} concurrent {json.dumps(results[gw.name]['concurrent'])}", flush=True)
        load["end"] = os.getloadavg()
    finally:
        for gw in gateways:
            gw.stop()
        backend.terminate()
        backend.wait(timeout=30)
    labels = {gw.name: gw.label for gw in gateways}
    print(f"\nload average (1/5/15 min) at start {load['start']}, at end {load['end']}; "
          f"{psutil.cpu_count()} CPUs; Python {sys.version.split()[0]}\n")
    print(table(results, labels, args.sessions))
    if args.json:
        args.json.write_text(json.dumps({"load": load, "args": {k: str(v) for k, v in vars(args).items()},
                                         "results": results}, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)
    errors = sum(r[p]["errors"] for r in results.values() for p in r)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
