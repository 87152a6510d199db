"""Fixtures for the trace store suite: every test runs against SQLite and a real PostgreSQL.

PostgreSQL: one throwaway database per test session (``agentr1_test_<hex>``), migrated once and
truncated before each test, and a second one (``..._1``) whose schema is reset for each test that
needs an empty database. Both are dropped (WITH FORCE) at the end. Point ``AGENTR1_TEST_PG_URL`` at another
server's maintenance database if needed; ``AGENTR1_SKIP_POSTGRES=1`` skips the PostgreSQL tests.
An unreachable server otherwise fails them: a green run always means both databases passed.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Iterator
from multiprocessing.pool import Pool
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from agentr1.store import TraceStore

PG_ADMIN_URL = os.environ.get("AGENTR1_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SKIP_POSTGRES = os.environ.get("AGENTR1_SKIP_POSTGRES") == "1"
SKIP_REASON = "AGENTR1_SKIP_POSTGRES=1: PostgreSQL tests skipped"
TABLES = ("rewards", "steps", "sessions", "runs")

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _driver_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1) if url.startswith("postgresql://") else url


class PostgresServer:
    """Creates throwaway databases on the test server and drops them all at the end."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.admin: Engine = create_engine(
            _driver_url(admin_url), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
        )
        self.prefix = f"agentr1_test_{uuid.uuid4().hex[:12]}"
        self.created: list[str] = []

    def check(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(text("SELECT 1"))

    def create_database(self) -> str:
        """A new empty database; returns its URL in the form users write (postgresql://...)."""
        name = f"{self.prefix}_{len(self.created)}" if self.created else self.prefix
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        self.created.append(name)
        url = make_url(self.admin_url).set(database=name)
        return url.render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self.admin.connect() as conn:
            for name in reversed(self.created):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.created.clear()
        self.admin.dispose()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    if SKIP_POSTGRES:
        pytest.skip(SKIP_REASON)
    server = PostgresServer(PG_ADMIN_URL)
    try:
        server.check()
        problem = None
    except Exception as exc:
        problem = f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}".strip()
        server.admin.dispose()
    if problem is not None:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({problem}). The store tests run against a real "
            "PostgreSQL: start one, point AGENTR1_TEST_PG_URL at its maintenance database, or set "
            "AGENTR1_SKIP_POSTGRES=1 to skip them.",
            pytrace=False,
        )
    yield server
    server.drop_all()


@pytest.fixture(scope="session")
def pg_url(pg_server: PostgresServer) -> str:
    """The session's shared, migrated PostgreSQL database."""
    url = pg_server.create_database()
    TraceStore.open(url, migrate=True).close()
    return url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """URL of a migrated database with no rows, for tests that open their own stores or processes."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'traces.db'}"
        TraceStore.open(url, migrate=True).close()
        return url
    url = request.getfixturevalue("pg_url")
    engine = create_engine(_driver_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '10s'"))  # a leaked transaction fails, not hangs
            conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    finally:
        engine.dispose()
    return url


@pytest.fixture(scope="session")
def pg_scratch_url(pg_server: PostgresServer) -> str:
    """A second PostgreSQL database, emptied for each test that asks for an empty one (a schema reset is
    much cheaper than a database per test: every DROP DATABASE forces a checkpoint)."""
    return pg_server.create_database()


@pytest.fixture
def empty_db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """URL of a database that exists but has no schema at all."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    url = request.getfixturevalue("pg_scratch_url")
    engine = create_engine(_driver_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '10s'"))
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    finally:
        engine.dispose()
    return url


@pytest.fixture(scope="session")
def spawn_pool() -> Iterator[Pool]:
    """Writer processes (spawned, like separate gateways), started once for the whole session."""
    pool = multiprocessing.get_context("spawn").Pool(3)
    try:
        pool.apply(os.getpid)  # fail here, not inside a test, if workers cannot start
        yield pool
    finally:
        pool.close()
        pool.join()


@pytest.fixture
def store(db_url: str) -> Iterator[TraceStore]:
    with TraceStore.open(db_url, migrate=False) as opened:
        yield opened
