"""Trace store throughput: steps written per second (batched and one step per call), sessions opened and
finished per second (one transaction each, as the gateway's session routes do) and steps read per second
(``iter_sessions`` with steps), on SQLite and PostgreSQL, with realistic step sizes.

    .venv/bin/python bench/store_bench.py                      # both backends, defaults
    .venv/bin/python bench/store_bench.py --backends sqlite --batch-steps 2000 --obs 4000

PostgreSQL runs in a throwaway database (created on the server of --pg-url, dropped at the end);
SQLite in a file in a temporary folder. Each backend runs --repeat times on a fresh database and
the fastest run of each operation is reported (the machine may be shared). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from agentr1.store import StepRecord, TraceStore
from agentr1.store.arrays import encode_floats, encode_ids

SYSTEM = "You are a careful assistant. Use the calculator tool for arithmetic. " * 4
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                            "parameters": {"type": "object", "properties": {
                                                "expression": {"type": "string"}}, "required": ["expression"]}}}]


@dataclass
class Result:
    backend: str
    mode: str
    steps: int
    calls: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


def make_steps(session_ids: list[str], steps_per_session: int, n_obs: int, n_act: int, seed: int) -> list[StepRecord]:
    """Steps shaped like the gateway's: a growing chat, ~n_obs prompt ids, n_act sampled ids + logprobs."""
    rng = np.random.default_rng(seed)
    out = []
    for sid in session_ids:
        for i in range(steps_per_session):
            history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {i} * 37 + 11?"}]
            history += [{"role": "assistant", "content": f"Let me compute step {k}."} for k in range(min(i, 3))]
            out.append(StepRecord(
                session_id=sid, index=i,
                observation_ids=rng.integers(0, 49_152, n_obs).tolist(),
                action_ids=rng.integers(0, 49_152, n_act).tolist(),
                action_logprobs=(-rng.exponential(0.7, n_act)).astype(np.float32).tolist(),
                messages_sent=history, messages_seen=history, tools=TOOLS,
                sampling={"temperature": 1.0, "top_p": 1.0, "max_tokens": n_act},
                action={"content": "The answer is " + "4" * 20, "tool_calls": [], "reasoning": None},
                finish_reason="stop", feedback_messages=[{"role": "tool", "content": "ok"}],
                feedback_ids=rng.integers(0, 49_152, 12).tolist(), policy_version=1, backend="local",
                model="smollm2-135m", latency_ms=float(rng.uniform(50, 500)),
            ))
    return out


def step_bytes(step: StepRecord) -> int:
    import json

    blobs = [encode_ids(step.observation_ids), encode_ids(step.action_ids), encode_floats(step.action_logprobs),
             encode_ids(step.feedback_ids)]
    json_fields = [step.messages_sent, step.messages_seen, step.tools, step.sampling, step.action,
                   step.feedback_messages]
    return sum(len(b or b"") for b in blobs) + sum(len(json.dumps(f)) for f in json_fields)


@contextmanager
def database(backend: str, pg_url: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="agentr1-bench-") as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    admin_url = make_url(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"agentr1_bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def describe(store: TraceStore) -> str:
    with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            version = conn.exec_driver_sql("select sqlite_version()").scalar()
            journal = conn.exec_driver_sql("pragma journal_mode").scalar()
            sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.exec_driver_sql("pragma synchronous").scalar()]
            return f"SQLite {version}, journal_mode={journal}, synchronous={sync} (file in a temp folder)"
        version = conn.exec_driver_sql("show server_version").scalar()
        sync = conn.exec_driver_sql("show synchronous_commit").scalar()
        return f"PostgreSQL {version} on localhost, synchronous_commit={sync} (throwaway database)"


def bench_backend(backend: str, url: str, args: argparse.Namespace, *, describe_it: bool) -> list[Result]:
    results = []
    with TraceStore.open(url) as store:
        if describe_it:
            print(f"{backend}: {describe(store)}", flush=True)
        run = store.create_run(f"bench-{backend}")
        per = args.steps_per_session

        # batched: args.batch_size steps per append_steps call (how the gateway's writer group-commits)
        n_sessions = args.batch_steps // per
        sids = [store.create_session(run_id=run) for _ in range(n_sessions)]
        steps = make_steps(sids, per, args.obs, args.act, seed=1)
        calls = 0
        start = time.perf_counter()
        for i in range(0, len(steps), args.batch_size):
            store.append_steps(steps[i:i + args.batch_size])
            calls += 1
        results.append(Result(backend, f"write, batches of {args.batch_size}", len(steps), calls,
                              time.perf_counter() - start))

        # single: one step per call, one transaction each
        sids = [store.create_session(run_id=run) for _ in range(args.single_steps // per)]
        steps = make_steps(sids, per, args.obs, args.act, seed=2)
        start = time.perf_counter()
        for step in steps:
            store.append_steps([step])
        results.append(Result(backend, "write, 1 step per call", len(steps), len(steps), time.perf_counter() - start))

        # sessions: opened and finished with a reward, one transaction each (POST /sessions and /finish), one at a
        # time, then from 20 threads at once (the gateway's thread pool during a rollout's opening and its end)
        def open_and_finish(i: int) -> None:
            sid = store.create_session(run_id=run, task_id=f"t{i}", group_id="g", metadata={"step": 1, "sample": i},
                                       key_hash=uuid.uuid4().hex)
            store.finish_session(sid, reward=1.0)

        start = time.perf_counter()
        for i in range(args.sessions):
            open_and_finish(i)
        results.append(Result(backend, "sessions opened + finished (a row is a session)", args.sessions,
                              2 * args.sessions, time.perf_counter() - start))
        start = time.perf_counter()
        with ThreadPoolExecutor(20) as pool:
            list(pool.map(open_and_finish, range(args.sessions, 2 * args.sessions)))
        results.append(Result(backend, "sessions opened + finished, 20 threads (a row is a session)", args.sessions,
                              2 * args.sessions, time.perf_counter() - start))

        # read: the trainer's streaming read of whole sessions with their steps
        total = n_read = 0
        start = time.perf_counter()
        for session in store.iter_sessions(run, statuses=("running",), chunk_size=args.chunk_size):  # (the finished ones above are not read)
            total += len(session.steps)
            n_read += 1
            assert len(session.steps[-1].observation_ids) == args.obs
        elapsed = time.perf_counter() - start
        assert total == args.batch_steps // per * per + args.single_steps // per * per, total
        results.append(Result(backend, f"read, iter_sessions (chunks of {args.chunk_size} sessions)", total,
                              -(-n_read // args.chunk_size), elapsed))
    return results


def table(results: list[Result]) -> str:
    lines = ["| backend | operation | steps | calls | seconds | steps/s |", "|---|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.backend} | {r.mode} | {r.steps:,} | {r.calls:,} | {r.seconds:.2f} | {r.rate:,.0f} |")
    by = {(r.backend, r.mode.split(",")[0] + ("-batch" if "batches" in r.mode else "")): r for r in results}
    lines.append("")
    for backend in dict.fromkeys(r.backend for r in results):
        batch, single = by.get((backend, "write-batch")), by.get((backend, "write"))
        if batch and single:
            lines.append(f"- {backend}: batched writes are {batch.rate / single.rate:.1f}x faster per step "
                         f"than one step per call")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument("--pg-url", default=os.environ.get("AGENTR1_TEST_PG_URL",
                                                           "postgresql://postgres@127.0.0.1:5432/postgres"),
                        help="a PostgreSQL server's maintenance database; the bench creates its own database there")
    parser.add_argument("--batch-steps", type=int, default=6_000, help="steps written in batches")
    parser.add_argument("--batch-size", type=int, default=500, help="steps per append_steps call when batching")
    parser.add_argument("--single-steps", type=int, default=600, help="steps written one per call")
    parser.add_argument("--steps-per-session", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=500, help="sessions opened and finished one per call")
    parser.add_argument("--obs", type=int, default=1_000, help="observation (prompt) token ids per step")
    parser.add_argument("--act", type=int, default=200, help="action token ids (and logprobs) per step")
    parser.add_argument("--chunk-size", type=int, default=64, help="iter_sessions chunk size (sessions)")
    parser.add_argument("--repeat", type=int, default=2, help="repetitions per backend; the fastest is reported")
    args = parser.parse_args()

    sample = make_steps(["s"], 1, args.obs, args.act, seed=0)[0]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"step: {args.obs} observation ids, {args.act} action ids + float32 logprobs, 12 feedback ids, "
          f"{len(sample.messages_sent)}-4 messages, tools; ~{step_bytes(sample) / 1024:.1f} KiB stored per step\n")
    results: list[Result] = []
    for backend in (b.strip() for b in args.backends.split(",")):
        runs = []
        for i in range(args.repeat):  # each repetition in a fresh database; keep the fastest of each operation
            with database(backend, args.pg_url) as url:
                runs.append(bench_backend(backend, url, args, describe_it=i == 0))
        results += [min(same, key=lambda r: r.seconds) for same in zip(*runs, strict=True)]
    print()
    print(table(results))
    print(f"\nload average (1/5/15 min) at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
