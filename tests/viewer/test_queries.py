"""The viewer's read queries (filters, sorts, counts, groups, policy versions) on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from agentr1.store import StepRecord, TraceStore
from agentr1.viewer import queries

PG_ADMIN_URL = os.environ.get("AGENTR1_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="module")
def pg_database():
    if os.environ.get("AGENTR1_SKIP_POSTGRES") == "1":
        pytest.skip("AGENTR1_SKIP_POSTGRES=1: PostgreSQL tests skipped")
    admin = create_engine(PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://", 1),
                          isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    name = f"agentr1_test_viewer_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({exc}); set AGENTR1_SKIP_POSTGRES=1 to skip",
                    pytrace=False)
    yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_database")
    with TraceStore.open(url) as opened:
        yield opened


def _session(store: TraceStore, run: str, *, group: str | None, steps: int, version: int = 0,
             reward: float | None = None, status: str = "finished") -> str:
    sid = store.create_session(run_id=run, task_id=(group or "solo").split("/")[-1], group_id=group)
    store.append_steps([StepRecord(session_id=sid, index=i, observation_ids=[1, 2, 3], action_ids=[4, 5],
                                   action_logprobs=[-0.1, -0.2], policy_version=version) for i in range(steps)])
    store.finish_session(sid, status=status, reward=reward)
    return sid


def test_filters_sorts_counts_and_groups(store):
    run = f"run-{uuid.uuid4().hex[:6]}"
    a = _session(store, run, group="g/1", steps=1, reward=0.0)
    b = _session(store, run, group="g/1", steps=2, reward=1.0)
    c = _session(store, run, group="g/2", steps=3, version=1, reward=0.5)
    d = _session(store, run, group=None, steps=1, version=1, status="failed")
    _session(store, "another-run", group="g/1", steps=1, reward=9.0)

    items, total = queries.list_sessions(store, run_id=run)
    assert total == 4 and [s.id for s in items] == [d, c, b, a]  # newest first
    assert {s.id: s.n_steps for s in items} == {a: 1, b: 2, c: 3, d: 1}
    by_reward, _ = queries.list_sessions(store, run_id=run, sort="reward", order="desc")
    assert [s.id for s in by_reward] == [b, c, a, d]  # unrewarded last
    by_reward_asc, _ = queries.list_sessions(store, run_id=run, sort="reward", order="asc")
    assert [s.id for s in by_reward_asc] == [a, c, b, d]
    by_steps, _ = queries.list_sessions(store, run_id=run, sort="steps", order="desc", limit=2, offset=1)
    assert [s.id for s in by_steps] == [b, a] or [s.id for s in by_steps] == [b, d]
    ranged, n = queries.list_sessions(store, run_id=run, min_reward=0.25, max_reward=0.75)
    assert [s.id for s in ranged] == [c] and n == 1
    failed, n = queries.list_sessions(store, run_id=run, status=["failed", "abandoned"])
    assert [s.id for s in failed] == [d] and n == 1
    grouped, n = queries.list_sessions(store, run_id=run, group_id="g/1", sort="created", order="asc")
    assert [s.id for s in grouped] == [a, b] and n == 2

    assert queries.status_counts(store, run) == {"finished": 3, "failed": 1}
    assert [(v.version, v.sessions, v.steps) for v in queries.policy_versions(store, run)] == [(0, 2, 3), (1, 2, 4)]
    groups, n = queries.list_groups(store, run, limit=10, offset=0)
    assert n == 2
    assert [(g.group_id, g.n, g.min_reward, g.max_reward) for g in groups] == [("g/2", 1, 0.5, 0.5),
                                                                                ("g/1", 2, 0.0, 1.0)]
    assert groups[1].mean_reward == pytest.approx(0.5)
    runs, total = queries.list_runs(store, limit=1, offset=0)
    assert total == 2 and len(runs) == 1
