"""What opening and ending sessions writes, inside one write transaction of :class:`~agentr1.store.TraceStore`
(:mod:`agentr1.store.writes` runs it): the rows of new sessions, and the statements that end them, one
``UPDATE ... WHERE status = 'running'`` a session, whose row count decides between concurrent ends. Prebuilt Core
statements: an ORM session and a read of the session's run for each cost more CPU than the SQL itself."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, delete, exists, insert, select, update

from agentr1.store.errors import SessionExists, SessionNotRunning, StoreError, UnknownSession
from agentr1.store.records import NewSession, SessionEnd
from agentr1.store.schema import RewardRow, SessionRow, StepRow

__all__ = ["FINAL_STATUSES", "SESSIONS_FOUND", "check_ends", "discard_session", "end_sessions", "insert_sessions",
           "new_id", "session_rows"]

FINAL_STATUSES = ("finished", "failed", "abandoned")
_SESSIONS = SessionRow.__table__
SESSIONS_FOUND = select(_SESSIONS.c.id).where(_SESSIONS.c.id.in_(bindparam("ids", expanding=True)))
_INSERT_SESSION = insert(_SESSIONS)
_SESSION_STATUS = select(_SESSIONS.c.status).where(_SESSIONS.c.id == bindparam("id"))
_FINISH_SESSION = (
    update(_SESSIONS)
    .where(_SESSIONS.c.id == bindparam("b_id"), _SESSIONS.c.status == "running")
    .values(status=bindparam("b_status"), error=bindparam("b_error"), finished_at=bindparam("b_finished_at"))
)

_REWARDS = RewardRow.__table__
_DISCARD_SESSION = delete(_SESSIONS).where(
    _SESSIONS.c.id == bindparam("id"), _SESSIONS.c.status == "running",
    ~exists().where(StepRow.__table__.c.session_id == _SESSIONS.c.id),
    ~exists().where(_REWARDS.c.session_id == _SESSIONS.c.id),
)


def new_id() -> str:
    return uuid.uuid4().hex


def session_rows(sessions: Sequence[NewSession]) -> list[dict[str, Any]]:
    """The ``sessions`` rows of ``sessions`` (an id made for those without); ``SessionExists`` for an id given twice."""
    rows = [{"id": s.session_id or new_id(), "run_id": s.run_id, "task_id": s.task_id, "group_id": s.group_id,
             "metadata": s.metadata or {}, "policy_version": s.policy_version, "key_hash": s.key_hash}
            for s in sessions]
    ids = [row["id"] for row in rows]
    if len(set(ids)) < len(ids):
        twice = next(sid for sid in ids if ids.count(sid) > 1)
        raise SessionExists(f"session {twice!r} is given twice")
    return rows


def insert_sessions(conn: Connection, rows: list[dict[str, Any]]) -> None:
    conn.execute(_INSERT_SESSION, rows)


def check_ends(ends: Sequence[SessionEnd]) -> None:
    """``ValueError`` for an end to a status that is not final (before anything is written)."""
    for end in ends:
        if end.status not in FINAL_STATUSES:
            raise ValueError(f"status must be one of {FINAL_STATUSES}, got {end.status!r}")


def end_sessions(conn: Connection, ends: Sequence[SessionEnd]) -> list[StoreError | None]:
    """End each of ``ends`` that is running, with its outcome reward; for each, None, or why it could not end
    (``UnknownSession``, ``SessionNotRunning``): those are left as they were."""
    now = dt.datetime.now(dt.UTC)
    failures: list[StoreError | None] = []
    rewards = []
    for end in ends:
        ended = conn.execute(_FINISH_SESSION, {"b_id": end.session_id, "b_status": end.status, "b_error": end.error,
                                               "b_finished_at": now})
        if ended.rowcount == 0:  # type: ignore[attr-defined]
            current = conn.execute(_SESSION_STATUS, {"id": end.session_id}).scalar()
            failures.append(UnknownSession(end.session_id) if current is None else
                            SessionNotRunning(f"session {end.session_id!r} is already {current}"))
            continue
        failures.append(None)
        if end.reward is not None:
            rewards.append({"session_id": end.session_id, "value": float(end.reward), "name": "outcome",
                            "source": "agent"})
    if rewards:
        conn.execute(insert(RewardRow), rewards)
    return failures


def discard_session(conn: Connection, session_id: str) -> bool:
    """Delete the session ``session_id`` if it is running and holds no step and no reward; whether it did."""
    return bool(conn.execute(_DISCARD_SESSION, {"id": session_id}).rowcount)  # type: ignore[attr-defined]
