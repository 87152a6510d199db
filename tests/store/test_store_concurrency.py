"""Many writers at once, as several gateway threads and several gateway processes would be."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.pool import Pool

from store_workers import make_step, obs_ids, write_steps

from agentr1.store import SessionNotRunning, StepConflict, TraceStore

CONTESTED = 1_000_000  # a shared-session index that every writer tries to insert


def _check_traces(store: TraceStore, own: list[str], shared: str, n_writers: int, n_steps: int) -> None:
    for sid in own:
        steps = store.get_session(sid).steps
        assert [s.index for s in steps] == list(range(n_steps)), sid
        assert all(s.observation_ids == obs_ids(sid, s.index) for s in steps)
    steps = store.get_session(shared).steps
    assert [s.index for s in steps] == [*range(n_writers * n_steps), CONTESTED]  # none lost, none doubled
    assert all(s.observation_ids == obs_ids(shared, s.index) for s in steps)
    assert store.get_run("conc").n_steps == 2 * n_writers * n_steps + 1


def _run_threads(n: int, fn: Callable[[int], object]) -> list[object]:
    barrier = threading.Barrier(n)

    def start(i: int) -> object:
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(start, range(n)))


def test_concurrent_threads(store: TraceStore, db_url: str) -> None:
    n_writers, n_steps = 6, 12
    own = [store.create_session(run_id="conc") for _ in range(n_writers)]
    shared = store.create_session(run_id="conc")
    results = _run_threads(
        n_writers, lambda w: write_steps(db_url, w, own[w], shared, n_writers, n_steps, CONTESTED)
    )
    assert sum(r["conflicts"] for r in results) == n_writers - 1  # exactly one writer won the race
    _check_traces(store, own, shared, n_writers, n_steps)


def test_concurrent_threads_share_one_store(store: TraceStore) -> None:
    """One TraceStore (one engine, one pool) used from many threads at once, as in the gateway."""
    n_writers, n_steps = 8, 15
    shared = store.create_session()

    def write(w: int) -> int:
        conflicts = 0
        for k in range(n_steps):
            store.append_steps([make_step(shared, w + k * n_writers)])
        try:
            store.append_steps([make_step(shared, CONTESTED)])
        except StepConflict:
            conflicts += 1
        return conflicts

    assert sum(_run_threads(n_writers, write)) == n_writers - 1
    assert [s.index for s in store.get_session(shared).steps] == [*range(n_writers * n_steps), CONTESTED]


def test_concurrent_processes(store: TraceStore, db_url: str, spawn_pool: Pool) -> None:
    n_writers, n_steps = 3, 12
    own = [store.create_session(run_id="conc") for _ in range(n_writers)]
    shared = store.create_session(run_id="conc")
    results = spawn_pool.starmap(
        write_steps, [(db_url, w, own[w], shared, n_writers, n_steps, CONTESTED) for w in range(n_writers)],
        chunksize=1,
    )
    assert sorted(r["worker"] for r in results) == list(range(n_writers))
    assert sum(r["conflicts"] for r in results) == n_writers - 1
    _check_traces(store, own, shared, n_writers, n_steps)


def test_concurrent_sessions_of_a_new_run(store: TraceStore) -> None:
    """A GRPO group starting at once: many sessions create the same new run concurrently."""
    n = 8
    ids = _run_threads(n, lambda i: store.create_session(run_id="fresh-run", group_id="g", task_id="t"))
    assert len(set(ids)) == n
    run = store.get_run("fresh-run")
    assert run.n_sessions == n
    assert {s.id for s in store.list_sessions("fresh-run")} == set(ids)


def test_concurrent_finish_only_one_wins(store: TraceStore) -> None:
    for _ in range(5):
        sid = store.create_session(run_id="fin")

        def finish(_: int, sid: str = sid) -> str:
            try:
                store.finish_session(sid, reward=1.0)
                return "ok"
            except SessionNotRunning:
                return "not running"

        outcomes = _run_threads(6, finish)
        assert sorted(outcomes) == ["not running"] * 5 + ["ok"]
        rec = store.get_session(sid)
        assert rec.status == "finished" and rec.reward == 1.0 and len(rec.rewards) == 1
