"""Marking interrupted sessions: `TraceStore.abandon_stale` abandons running sessions with no activity
since the cutoff (not merely old ones: a long session still taking calls is left alone), optionally
of one run only. On SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from agentr1.store import StepRecord, TraceStore


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}" if request.param == "sqlite" else "postgresql://postgres@127.0.0.1:5432/test"
    with TraceStore.open(url) as s:
        yield s


def test_only_idle_running_sessions_of_the_run_are_abandoned(store):
    run, other = f"r-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
    idle, active, done, elsewhere = (store.create_session(run_id=r) for r in (run, run, run, other))
    store.finish_session(done)
    time.sleep(0.02)
    cutoff = dt.datetime.now(dt.UTC)
    time.sleep(0.02)
    store.append_steps([StepRecord(session_id=active, index=0, observation_ids=[1], action_ids=[2])])
    assert store.abandon_stale(cutoff, run_id=run) == 1
    status = {sid: store.get_session(sid, steps=False).status for sid in (idle, active, done, elsewhere)}
    assert status == {idle: "abandoned", active: "running", done: "finished", elsewhere: "running"}
    assert store.get_session(idle, steps=False).finished_at is not None
    assert store.abandon_stale(cutoff, run_id=run) == 0
