"""TraceStore.try_append_steps: the commit that never waits. On SQLite it commits when the write lock is free
and writes nothing (at once, not after the 30 s busy timeout) when another connection holds it; the store's
normal, waiting writes are unchanged after it. On PostgreSQL it always declines."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from store_workers import make_step

from agentr1.store import NewSession, SessionEnd, SessionExists, SessionNotRunning, TraceStore


def sqlite_path(store: TraceStore) -> str:
    return str(store.engine.url.database)


def hold_write_lock(path: str) -> sqlite3.Connection:
    """A second, plain sqlite3 connection holding the database's write lock (BEGIN IMMEDIATE)."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


def n_steps(store: TraceStore, sid: str) -> int:
    return len(store.get_session(sid).steps)


def test_commits_when_the_write_lock_is_free(store: TraceStore, backend: str) -> None:
    sid = store.create_session(run_id="try")
    done = store.try_append_steps([make_step(sid, 0)])
    assert done is (backend == "sqlite")
    assert n_steps(store, sid) == (1 if backend == "sqlite" else 0)


@pytest.fixture
def sqlite_store(tmp_path) -> TraceStore:
    """The write lock is SQLite's: these run on SQLite only."""
    with TraceStore.open(f"sqlite:///{tmp_path / 'try.db'}") as store:
        yield store


def test_writes_nothing_and_does_not_wait_while_another_connection_holds_the_lock(sqlite_store: TraceStore) -> None:
    store = sqlite_store
    sid = store.create_session(run_id="try")
    store.append_steps([make_step(sid, 0)])
    other = hold_write_lock(sqlite_path(store))
    started = time.monotonic()
    assert store.try_append_steps([make_step(sid, 1)]) is False
    assert time.monotonic() - started < 1.0  # declined at once, not after the busy timeout
    other.rollback()
    other.close()
    assert n_steps(store, sid) == 1  # nothing of the declined batch
    assert store.try_append_steps([make_step(sid, 1)]) is True  # the same batch, once the lock is free
    assert [s.index for s in store.get_session(sid).steps] == [0, 1]


def test_the_waiting_writes_still_wait_for_the_lock_after_a_declined_try(sqlite_store: TraceStore) -> None:
    """The no-wait setting is this one transaction's: the connection goes back to the pool waiting again."""
    store = sqlite_store
    sid = store.create_session(run_id="try")
    other = hold_write_lock(sqlite_path(store))
    assert store.try_append_steps([make_step(sid, 0)]) is False
    release = threading.Timer(0.5, lambda: (other.rollback(), other.close()))
    release.start()
    started = time.monotonic()
    store.append_steps([make_step(sid, 0)])  # waits for the lock (busy timeout 30 s), then commits
    assert time.monotonic() - started >= 0.4
    release.join()
    assert n_steps(store, sid) == 1


def test_sessions_open_and_finish_in_place_only_when_that_need_not_wait(sqlite_store: TraceStore) -> None:
    """try_create_sessions / try_finish_sessions: as try_append_steps, for the gateway's session routes."""
    store = sqlite_store
    assert store.try_create_sessions([NewSession(run_id="new-run")]) is None  # a run not seen yet: a lookup first
    sid = store.create_session(run_id="try")
    other = hold_write_lock(sqlite_path(store))
    started = time.monotonic()
    assert store.try_create_sessions([NewSession(run_id="try", task_id="t", session_id="declined")]) is None
    assert store.try_finish_sessions([SessionEnd(sid, reward=1.0)]) is None
    assert time.monotonic() - started < 1.0  # declined at once, not after the busy timeout
    other.rollback()
    other.close()
    assert [s.id for s in store.list_sessions("try")] == [sid]  # nothing of the declined writes
    assert store.get_session(sid, steps=False).status == "running"
    assert store.try_create_sessions([NewSession(run_id="try", task_id="t", session_id="in-place")]) == ["in-place"]
    assert store.try_finish_sessions([SessionEnd(sid, reward=1.0)]) == [None]
    record = store.get_session(sid, steps=False)
    assert (record.status, record.reward) == ("finished", 1.0)
    (again,) = store.try_finish_sessions([SessionEnd(sid)])  # the errors of finish_sessions, in place too
    assert isinstance(again, SessionNotRunning)
    with pytest.raises(SessionExists):
        store.try_create_sessions([NewSession(run_id="try", session_id="in-place")])


def test_a_writer_of_this_process_holding_its_turn_makes_the_others_decline_in_place(sqlite_store: TraceStore) -> None:
    """Writers of one process take turns before SQLite's lock: while one holds its turn, a try declines at once
    (SQLite's lock is not free either) and a waiting write waits for the turn, then commits."""
    store = sqlite_store
    sid = store.create_session(run_id="try")
    inside, release = threading.Event(), threading.Event()

    def slow_write(conn) -> None:
        inside.set()
        release.wait(5)

    holder = threading.Thread(target=store._writes.transaction, args=(slow_write,), kwargs={"wait": True})
    holder.start()
    assert inside.wait(5)
    assert store.try_append_steps([make_step(sid, 0)]) is False
    assert store.try_finish_sessions([SessionEnd(sid)]) is None
    threading.Timer(0.3, release.set).start()
    store.append_steps([make_step(sid, 0)])  # waits for the turn
    holder.join(5)
    assert n_steps(store, sid) == 1
