"""Database faults under a serving gateway: SQLite slow (a write lock held by another process's
connection for a while), locked past the busy timeout, and PostgreSQL connections terminated
(`pg_terminate_backend`, as a database restart or failover does) while calls run.

What the agent must see: its answer (late) while the database is merely slow; a 503
``store_unavailable`` with Retry-After when the step cannot be committed (durable writes: no answer
without a stored step); and after the fault, the same call retried continues the session at the
index it failed at, as a clean continuation (no gap, no drift), every answered call stored once.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid

import httpx
import openai
import pytest

from agentr1.core.rendering import load_renderer
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.gateway.writer import StepWriter
from agentr1.store import StepRecord, StoreError, TraceStore
from agentr1.store import database as store_engine

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="module")
def renderer(tiny_model_path):
    return load_renderer(tiny_model_path)


def serve(db_url: str, renderer):  # type: ignore[no-untyped-def]
    store = TraceStore.open(db_url)
    backend = InstantBackend(renderer.tokenizer, "four", model_name="policy")
    app = create_app(GatewaySettings(model="tiny", db=db_url, accept_any_model=True), store=store, backend=backend,
                     renderer=renderer)
    return store, BackgroundServer(app)


def new_session(url: str, run_id: str = "faults") -> tuple[str, openai.OpenAI]:
    created = httpx.post(f"{url}/sessions", json={"run_id": run_id}).json()
    return created["id"], openai.OpenAI(base_url=created["base_url"], api_key=created["api_key"], max_retries=0,
                                        timeout=60)


def turn(client: openai.OpenAI, messages: list[dict]) -> tuple[int, list[dict]]:
    """One call; the step index it was stored as and the history extended by its answer."""
    reply = client.chat.completions.create(model="m", messages=messages, max_tokens=8)  # type: ignore[arg-type]
    answered = [*messages, {"role": "assistant", "content": reply.choices[0].message.content}]
    return (reply.model_extra or {})["agentr1"]["steps"][0], answered


class HeldWriteLock:
    """Another connection holding SQLite's write lock (BEGIN IMMEDIATE) until released."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


def test_a_slow_sqlite_delays_answers_and_loses_none(tmp_path, renderer):
    path = tmp_path / "slow.db"
    store, server = serve(f"sqlite:///{path}", renderer)
    with server as url:
        sessions = [new_session(url) for _ in range(8)]
        lock = HeldWriteLock(str(path))
        threading.Timer(1.5, lock.release).start()  # the database is busy for 1.5 s
        started = time.monotonic()

        async def agents() -> list[int]:
            async def one(client: openai.OpenAI) -> int:
                return (await asyncio.to_thread(turn, client, [{"role": "user", "content": "hi"}]))[0]
            return await asyncio.gather(*(one(c) for _, c in sessions))

        indices = asyncio.run(agents())
        assert time.monotonic() - started >= 1.4  # they waited for the lock, then were answered
        assert indices == [0] * 8
        assert all(len(store.get_session(sid).steps) == 1 for sid, _ in sessions)
    store.close()


def test_sqlite_locked_past_the_busy_timeout_is_a_503_and_the_retry_continues_cleanly(tmp_path, renderer,
                                                                                      monkeypatch):
    monkeypatch.setattr(store_engine, "SQLITE_BUSY_TIMEOUT_MS", 300)  # instead of 30 s
    path = tmp_path / "locked.db"
    store, server = serve(f"sqlite:///{path}", renderer)
    with server as url:
        sid, client = new_session(url)
        first, history = turn(client, [{"role": "user", "content": "hi"}])
        request = [*history, {"role": "user", "content": "and again?"}]
        lock = HeldWriteLock(str(path))
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as refused:
            turn(client, request)
        waited = time.monotonic() - started
        lock.release()
        assert refused.value.status_code == 503 and refused.value.body["code"] == "store_unavailable"
        assert refused.value.response.headers["retry-after"]
        assert waited < 5, f"the agent waited {waited:.1f} s for its 503"
        assert [s.index for s in store.get_session(sid).steps] == [0]  # not answered: not stored
        second, _ = turn(client, request)  # the agent retries the same call
    steps = store.get_session(sid).steps
    store.close()
    assert (first, second) == (0, 1)
    assert [s.index for s in steps] == [0, 1]
    assert steps[1].parent_index == 0 and not steps[1].drift
    assert steps[0].feedback_messages == [{"role": "user", "content": "and again?"}]


def test_a_locked_sqlite_fails_a_whole_batch_within_one_busy_timeout(tmp_path, monkeypatch):
    """A commit that fails on the database (not on one step) is not retried step by step: each retry
    would wait the busy timeout again (256 steps x 30 s), holding every later commit back."""
    monkeypatch.setattr(store_engine, "SQLITE_BUSY_TIMEOUT_MS", 500)
    path = tmp_path / "batch.db"
    store = TraceStore.open(f"sqlite:///{path}")
    sids = [store.create_session() for _ in range(24)]

    async def commit_all_while_locked() -> tuple[list[BaseException | None], float]:
        writer = StepWriter(store)
        await writer.start()
        lock = HeldWriteLock(str(path))
        started = time.monotonic()
        futures = [writer.submit(StepRecord(session_id=sid, index=0, observation_ids=[1], action_ids=[2]))
                   for sid in sids]  # all queued before the writer runs: one batch
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        waited = time.monotonic() - started
        lock.release()
        await writer.close()
        return outcomes, waited

    outcomes, waited = asyncio.run(commit_all_while_locked())
    assert all(isinstance(o, StoreError) and "locked" in str(o) for o in outcomes), outcomes
    assert waited < 3, f"24 steps failed after {waited:.1f} s (one by one: 24 x 0.5 s)"
    assert all(store.get_session(sid).steps == [] for sid in sids)
    store.close()


@pytest.mark.postgres
def test_postgres_connections_terminated_mid_load_lose_no_answered_step(renderer):
    """pg_terminate_backend on every gateway connection, repeatedly, while 16 agents run 10 turns."""
    run_id = f"pgkill-{uuid.uuid4().hex[:8]}"
    # only this gateway's connections are terminated (others share the database): tag them
    store, server = serve(f"{PG_URL}?application_name={run_id}", renderer)
    killer = TraceStore.open(PG_URL)
    answered: dict[str, list[int]] = {}
    failures: list[str] = []
    stop = threading.Event()
    terminated = 0

    def terminate_loop() -> None:
        nonlocal terminated
        from sqlalchemy import text

        while not stop.is_set():
            with killer.engine.connect() as conn:
                terminated += len(conn.execute(text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :name "
                    "AND pid <> pg_backend_pid()"), {"name": run_id}).all())
            time.sleep(0.15)

    def agent(client: openai.OpenAI, sid: str) -> None:
        messages: list[dict] = [{"role": "user", "content": f"agent {sid}"}]
        answered[sid] = []
        for k in range(10):
            request = [*messages, {"role": "user", "content": f"turn {k}"}] if k else messages
            for _attempt in range(5):  # what an agent does with a 503: retry the same call
                try:
                    index, messages = turn(client, request)
                except openai.APIStatusError as exc:
                    failures.append(f"{exc.status_code} {exc.body.get('code')}")
                    time.sleep(0.2)
                    continue
                answered[sid].append(index)
                break

    with server as url:
        sessions = [new_session(url, run_id) for _ in range(16)]
        threads = [threading.Thread(target=agent, args=(c, sid)) for sid, c in sessions]
        chaos = threading.Thread(target=terminate_loop)
        chaos.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        chaos.join()
    try:
        assert terminated > 0
        assert all(f.startswith("503 store_unavailable") for f in failures), failures
        for sid, indices in answered.items():
            assert indices == list(range(10)), (sid, indices)  # every turn answered (after retries), in order
            steps = store.get_session(sid).steps
            assert [s.index for s in steps] == list(range(10))
            assert not any(s.drift for s in steps)
    finally:
        store.close()
        killer.close()


class ThreadRecordingStore(TraceStore):
    """A real SQLite store that notes which thread each successful commit ran on."""

    committed_on: list[int]

    def append_steps(self, steps, feedback=()):
        super().append_steps(steps, feedback)
        self.committed_on.append(threading.get_ident())

    def try_append_steps(self, steps, feedback=()):
        done = super().try_append_steps(steps, feedback)
        if done:
            self.committed_on.append(threading.get_ident())
        return done


def test_the_writer_commits_on_the_loop_when_it_can_and_never_blocks_it_on_a_held_lock(tmp_path):
    """Free lock: the commit runs on the event loop's own thread (no hand-off). Lock held by another connection:
    the commit goes to a thread and waits there, the loop keeps running (a ticker every 10 ms goes on), and the
    step is stored once the lock is released."""
    path = tmp_path / "inline.db"
    store = ThreadRecordingStore(TraceStore.open(f"sqlite:///{path}").engine)
    store.committed_on = []
    sid = store.create_session()

    async def scenario() -> tuple[int, int, float]:
        loop_thread = threading.get_ident()
        writer = StepWriter(store, interval_s=0)
        await writer.start()
        await writer.submit(StepRecord(session_id=sid, index=0, observation_ids=[1], action_ids=[2]))
        lock = HeldWriteLock(str(path))
        threading.Timer(1.0, lock.release).start()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        started = time.monotonic()
        await writer.submit(StepRecord(session_id=sid, index=1, observation_ids=[1], action_ids=[2]))
        waited = time.monotonic() - started
        ticking.cancel()
        await writer.close()
        return loop_thread, ticks, waited

    loop_thread, ticks, waited = asyncio.run(scenario())
    assert store.committed_on[0] == loop_thread  # lock free: committed in place
    assert store.committed_on[1] != loop_thread  # lock held: committed by a worker thread
    assert waited >= 0.9 and ticks >= 30, (waited, ticks)  # it waited for the lock; the loop did not
    assert [s.index for s in store.get_session(sid).steps] == [0, 1]
    store.close()
