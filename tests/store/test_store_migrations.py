"""Alembic migrations: empty -> head, down to base and back, and agreement with the ORM."""

from __future__ import annotations

from multiprocessing.pool import Pool

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, column, func, inspect, select, table
from store_workers import make_step, open_and_write

from agentr1.store import StoreNotMigrated, TraceStore, migrate
from agentr1.store.database import create_store_engine
from agentr1.store.schema import Base

TABLES = {"runs", "sessions", "steps", "rewards"}
VERSION_TABLE = table("alembic_version", column("version_num"))


def _schema_diff(engine: Engine) -> list:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        return compare_metadata(ctx, Base.metadata)


def test_upgrade_downgrade_upgrade(empty_db_url: str) -> None:
    engine = create_store_engine(empty_db_url)
    try:
        assert migrate.current_revision(engine) is None
        assert not TABLES & set(inspect(engine).get_table_names())

        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
        assert TABLES <= set(inspect(engine).get_table_names())
        assert _schema_diff(engine) == []  # the migrations build exactly the ORM's schema

        migrate.downgrade(engine, "base")
        assert migrate.current_revision(engine) is None
        assert not TABLES & set(inspect(engine).get_table_names())

        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
        assert _schema_diff(engine) == []
        indexes = {ix["name"] for ix in inspect(engine).get_indexes("sessions")}
        assert {"ix_sessions_run_group", "ix_sessions_run_id", "ix_sessions_status"} <= indexes
        uniques = {tuple(u["column_names"]) for u in inspect(engine).get_unique_constraints("steps")}
        assert ("session_id", "index") in uniques
    finally:
        engine.dispose()

    with TraceStore.open(empty_db_url, migrate=False) as store:  # usable after the round trip
        sid = store.create_session()
        store.append_steps([make_step(sid, 0)])
        assert store.get_session(sid).n_steps == 1


def test_upgrade_is_idempotent(db_url: str) -> None:
    engine = create_store_engine(db_url)
    try:
        migrate.upgrade(engine)
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(VERSION_TABLE)).scalar() == 1
    finally:
        engine.dispose()


def test_open_unmigrated_database(empty_db_url: str) -> None:
    with pytest.raises(StoreNotMigrated, match=r"schema empty.*run `agentr1 traces migrate"):
        TraceStore.open(empty_db_url, migrate=False)
    with TraceStore.open(empty_db_url) as store:  # migrate=True is the default
        assert migrate.current_revision(store.engine) == migrate.head_revision()
        assert store.list_runs() == []


def test_open_database_behind_head(db_url: str) -> None:
    engine = create_store_engine(db_url)
    migrate.downgrade(engine, "base")
    engine.dispose()
    with pytest.raises(StoreNotMigrated, match=migrate.head_revision()) as info:
        TraceStore.open(db_url, migrate=False)
    assert "agentr1 traces migrate" in str(info.value)
    TraceStore.open(db_url).close()
    TraceStore.open(db_url, migrate=False).close()


def test_many_processes_open_a_fresh_database_at_once(empty_db_url: str, spawn_pool: Pool) -> None:
    """Several gateways starting together on an empty database: one migrates, none fails."""
    n = 3
    sids = spawn_pool.starmap(open_and_write, [(empty_db_url, w) for w in range(n)], chunksize=1)
    assert sorted(sids) == [f"proc-{w}" for w in range(n)]
    with TraceStore.open(empty_db_url, migrate=False) as store:
        assert store.get_run("shared-run").n_sessions == n
        assert store.get_run("shared-run").n_steps == n
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(VERSION_TABLE)).scalar() == 1


def test_an_upgrade_from_empty_is_one_transaction_under_the_write_lock(tmp_path) -> None:
    """Every migration of one upgrade commits together: Alembic reads the version once, so a commit between two
    migrations let another process starting on the same fresh file run the next migration twice (CI, once)."""
    from sqlalchemy import event

    engine = create_store_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    begins: list[object] = []
    commits: list[int] = []
    event.listen(engine, "begin", lambda conn: begins.append(conn.get_execution_options().get("sqlite_write")))
    event.listen(engine, "commit", lambda conn: commits.append(1))
    try:
        migrate.upgrade(engine)
        assert (begins, len(commits)) == ([True], 1)  # one IMMEDIATE transaction, one commit, every migration in it
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()


def test_model_path_comes_with_0004_and_earlier_steps_read_back_without_it(empty_db_url: str) -> None:
    engine = create_store_engine(empty_db_url)
    try:
        migrate.upgrade(engine)
        with TraceStore.open(empty_db_url, migrate=False) as store:
            sid = store.create_session()
            store.append_steps([make_step(sid, 0, model="policy", model_path="/models/policy-dir")])
            assert store.get_session(sid).steps[0].model_path == "/models/policy-dir"
        migrate.downgrade(engine, "0003")
        assert "model_path" not in {c["name"] for c in inspect(engine).get_columns("steps")}
        migrate.upgrade(engine)
        assert _schema_diff(engine) == []
        with TraceStore.open(empty_db_url, migrate=False) as store:
            (step,) = store.get_session(sid).steps  # stored before: kept, its model directory unknown
            assert (step.model, step.model_path, step.action_ids) == ("policy", None, [0, 1, 2, 3])
    finally:
        engine.dispose()
