"""Database URLs and engines: SQLite (embedded default, WAL) and PostgreSQL (many writers)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from agentr1.store import jsonio
from agentr1.store.errors import StoreConnectionError

DEFAULT_DB = "sqlite:///agentr1.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalize_url(url: str | os.PathLike[str]) -> str:
    """Accept a SQLAlchemy URL or a plain file path (treated as SQLite)."""
    text = os.fspath(url).strip()
    if not text:
        raise StoreConnectionError("empty database URL; pass e.g. sqlite:///traces.db or postgresql://host/db")
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    if text.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text.split("://", 1)[1]
    return text


def create_store_engine(url: str | os.PathLike[str], **kwargs: Any) -> Engine:
    text = normalize_url(url)
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a non-numeric port
        raise StoreConnectionError(
            f"cannot parse database URL {text!r}: expected sqlite:///path.db or postgresql://user@host/db"
        ) from exc
    backend = parsed.get_backend_name()
    kwargs.setdefault("json_serializer", jsonio.dumps)  # the JSON columns through orjson (see jsonio)
    kwargs.setdefault("json_deserializer", jsonio.loads)
    if backend == "sqlite":
        return _sqlite_engine(parsed, **kwargs)
    if backend == "postgresql":
        try:
            return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20, **kwargs)
        except ModuleNotFoundError as exc:
            raise StoreConnectionError(
                "PostgreSQL needs the psycopg driver: pip install 'agentr1[postgres]'"
            ) from exc
    raise StoreConnectionError(f"unsupported database {backend!r} in {text!r}: use sqlite or postgresql")


def _set_wal(cur: Any) -> None:
    """Switch to WAL. On a brand-new file several processes may race for the exclusive lock this
    needs, and SQLite answers "database is locked" without calling the busy handler: retry."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _sqlite_engine(parsed: Any, **kwargs: Any) -> Engine:
    database = parsed.database
    in_memory = database in (None, "", ":memory:")
    if not in_memory:
        parent = Path(database).expanduser().resolve().parent
        if not parent.is_dir():
            raise StoreConnectionError(f"cannot open SQLite database {database!r}: folder {parent} does not exist")
    if in_memory:
        kwargs.setdefault("poolclass", StaticPool)  # one shared connection, or each thread sees its own db
    engine = create_engine(
        parsed,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        **kwargs,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (pysqlite's implicit transactions are unreliable).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        if not in_memory:
            _set_wal(cur)
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the write lock up front, so two writers never deadlock on a lock upgrade.
        mode = "IMMEDIATE" if conn.get_execution_options().get("sqlite_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine
