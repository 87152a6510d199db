"""Bounded load test of the gateway: N concurrent agents x T turns, then an audit of the store.

    .venv/bin/python bench/load_test.py --sessions 256 --turns 20                 # instant backend, SQLite
    .venv/bin/python bench/load_test.py --sessions 16 --turns 5 --kind local      # the local engine (tiny model)
    .venv/bin/python bench/load_test.py --db postgresql://postgres@127.0.0.1:5432/test

The gateway runs as its own uvicorn process (bench/gateway_server.py). Each agent is a real
``openai.AsyncOpenAI`` client on its session's ``base_url``; every turn sends the whole history
plus a new user message that names the session and the turn, so a step stored in the wrong session
or order is visible. While the load runs, the gateway process's RSS is sampled (psutil); with
``--waves W`` the load is repeated W times with new sessions, so the RSS after each wave shows
whether memory levels off or keeps growing.

The audit, from the store, after the load: every answered call is exactly one stored step, in its
own session, at the index the gateway answered with, with the turn's user message as the last
message sent and the answered text as its action; steps are 0..T-1 with no gaps and nothing extra;
the run holds no other sessions. ``--json PATH`` writes the summary; a markdown row is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_server import start_server

MB = 1024 * 1024


@dataclass
class Answer:
    turn: int
    sent: str
    received: str
    step: int
    latency_ms: float


@dataclass
class Agent:
    session_id: str
    answers: list[Answer] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class RssSampler:
    """Samples a process's resident memory every ``interval_s`` until stopped."""

    def __init__(self, pid: int, interval_s: float) -> None:
        self.process = psutil.Process(pid)
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MiB)
        self._started = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> float:
        mib = self.process.memory_info().rss / MB
        self.samples.append((round(time.monotonic() - self._started, 2), round(mib, 1)))
        return mib

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.sample()


async def run_agent(http: httpx.AsyncClient, url: str, run_id: str, index: int, turns: int,
                    max_tokens: int) -> Agent:
    try:
        answer = await http.post(f"{url}/sessions", json={"run_id": run_id, "task_id": f"load-{index}"})
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        return Agent("", errors=[f"POST /sessions: {type(exc).__name__}: {exc}"])
    created = answer.json()
    agent = Agent(created["id"])
    client = AsyncOpenAI(base_url=created["base_url"], api_key=created.get("api_key") or "none",
                         http_client=http, max_retries=0)
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        sent = f"session {index} turn {turn} ({uuid.uuid4().hex[:8]}): what is 2+2?"
        messages.append({"role": "user", "content": sent})
        started = time.perf_counter()
        try:
            reply = await client.chat.completions.create(model="bench", messages=messages,  # type: ignore[arg-type]
                                                         max_tokens=max_tokens, temperature=0)
        except Exception as exc:  # an unanswered call: counted, and the agent stops
            cause = f" (from {type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
            agent.errors.append(f"turn {turn}: {type(exc).__name__}: {exc}{cause}")
            return agent
        latency = (time.perf_counter() - started) * 1000
        extra = reply.model_extra or {}
        received = reply.choices[0].message.content or ""
        agent.answers.append(Answer(turn, sent, received, extra["agentr1"]["steps"][0], latency))
        messages.append({"role": "assistant", "content": received})
    return agent


def audit(db: str, run_id: str, agents: list[Agent]) -> dict[str, Any]:
    """Check the store against what the agents were answered; returns counts of every kind of fault."""
    from agentr1.store import TraceStore

    problems: list[str] = []
    stored_steps = 0
    with TraceStore.open(db, migrate=False) as store:
        in_run = {s.id for s in store.list_sessions(run_id, limit=len(agents) * 2 + 10)}
        agents = [a for a in agents if a.session_id]  # a failed POST /sessions is counted in errors
        ours = {a.session_id for a in agents}
        if in_run != ours:
            problems.append(f"run holds {len(in_run - ours)} unexpected and lacks {len(ours - in_run)} sessions")
        for agent in agents:
            steps = store.get_session(agent.session_id).steps
            stored_steps += len(steps)
            if [s.index for s in steps] != list(range(len(steps))):
                problems.append(f"{agent.session_id}: step indices {[s.index for s in steps]}")
            if len(steps) != len(agent.answers):  # every answered call once; unanswered ones absent
                problems.append(f"{agent.session_id}: {len(agent.answers)} answered, {len(steps)} stored")
            for answer, step in zip(agent.answers, steps, strict=False):
                if answer.step != step.index or answer.turn != step.index:
                    problems.append(f"{agent.session_id}: turn {answer.turn} answered as step {answer.step}")
                if step.messages_sent[-1].get("content") != answer.sent:
                    problems.append(f"{agent.session_id} step {step.index}: stored request is another turn's")
                if (step.action or {}).get("content") != answer.received:
                    problems.append(f"{agent.session_id} step {step.index}: stored action differs from the answer")
    return {"stored_steps": stored_steps, "problems": len(problems), "first_problems": problems[:10]}


async def drive(url: str, pid: int, *, run_id: str, sessions: int, turns: int, waves: int, max_tokens: int,
                sample_interval_s: float) -> tuple[list[Agent], dict[str, Any]]:
    sampler = RssSampler(pid, sample_interval_s)
    rss_start = sampler.sample()
    rss_after_wave: list[float] = []
    agents: list[Agent] = []
    # idle connections expire before uvicorn's 5 s keep-alive does: reusing one the server is closing
    # at that moment fails in the client (a race of HTTP/1.1 keep-alive, not a gateway fault)
    limits = httpx.Limits(max_connections=sessions + 8, max_keepalive_connections=sessions + 8, keepalive_expiry=2.0)
    started = time.monotonic()
    sampler.start()
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        for wave in range(waves):
            agents += await asyncio.gather(*(run_agent(http, url, run_id, wave * sessions + i, turns, max_tokens)
                                             for i in range(sessions)))
            rss_after_wave.append(round(sampler.sample(), 1))
    wall = time.monotonic() - started
    await sampler.stop()
    latencies = [a.latency_ms for agent in agents for a in agent.answers]
    peak = max(mib for _, mib in sampler.samples)
    return agents, {
        "wall_s": round(wall, 1), "answered": len(latencies), "errors": sum(len(a.errors) for a in agents),
        "first_errors": [e for a in agents for e in a.errors][:5],
        "calls_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(percentile(latencies, 0.50), 1), "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies, default=float("nan")), 1),
        "rss_start_mib": round(rss_start, 1), "rss_peak_mib": round(peak, 1),
        "rss_end_mib": sampler.samples[-1][1], "rss_after_wave_mib": rss_after_wave,
        "rss_samples": sampler.samples[:: max(1, len(sampler.samples) // 60)],
    }


def load_test(*, kind: str = "instant", model: str = "tiny", db: str, sessions: int, turns: int, waves: int = 1,
              max_tokens: int = 8, sample_interval_s: float = 0.5) -> dict[str, Any]:
    """Run the load against a fresh gateway process on ``db`` and audit the store; the summary."""
    run_id = f"load-{uuid.uuid4().hex[:8]}"
    with start_server(kind=kind, model=model, db=db) as server:
        agents, figures = asyncio.run(drive(server.url, server.pid, run_id=run_id, sessions=sessions, turns=turns,
                                            waves=waves, max_tokens=max_tokens,
                                            sample_interval_s=sample_interval_s))
    database = "postgresql" if db.startswith("postgres") else "sqlite"
    return {"kind": kind, "model": model, "db": database, "run_id": run_id, "sessions": sessions * waves,
            "concurrent": sessions, "turns": turns, "waves": waves, **figures, **audit(db, run_id, agents)}


def markdown_row(s: dict[str, Any]) -> str:
    return (f"| {s['kind']} | {s['db']} | {s['concurrent']} x {s['turns']} x {s['waves']} | {s['answered']} | "
            f"{s['errors']} | {s['stored_steps']} | {s['problems']} | {s['wall_s']} | {s['calls_per_s']} | "
            f"{s['p50_ms']} | {s['p99_ms']} | {s['rss_start_mib']} / {s['rss_peak_mib']} / {s['rss_end_mib']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=["instant", "local"], default="instant")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--db", default=None, help="default: a new SQLite file in the working directory")
    parser.add_argument("--sessions", type=int, default=256, help="concurrent sessions (agents)")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--waves", type=int, default=1, help="repeat the load with new sessions")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    db = args.db or f"sqlite:///{Path.cwd() / f'load-{uuid.uuid4().hex[:6]}.db'}"
    summary = load_test(kind=args.kind, model=args.model, db=db, sessions=args.sessions, turns=args.turns,
                        waves=args.waves, max_tokens=args.max_tokens)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "rss_samples"}, indent=2))
    print("| backend | db | concurrent x turns x waves | answered | errors | stored | audit problems | s | calls/s "
          "| p50 ms | p99 ms | RSS start / peak / end MiB |")
    print(markdown_row(summary))
    if summary["problems"] or summary["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
