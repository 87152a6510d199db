"""The step-trace schema: runs, sessions (trajectories), steps and rewards.

This module is the single definition of the trace tables; the Alembic migrations under
``migrations/`` create exactly these tables, and a test checks that they agree.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = ["REWARD_SOURCES", "SESSION_STATUSES", "Base", "RewardRow", "RunRow", "SessionRow", "StepRow"]

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SESSION_STATUSES = ("running", "finished", "failed", "abandoned")
REWARD_SOURCES = ("agent", "environment", "judge", "gateway")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC timestamps on every database (SQLite drops the zone on its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return value.astimezone(dt.UTC)  # SQLite keeps only the wall time: store it in UTC

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)

    sessions: Mapped[list[SessionRow]] = relationship(back_populates="run", lazy="raise")


class SessionRow(Base):
    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_run_group", "run_id", "group_id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    task_id: Mapped[str | None] = mapped_column(String(255))
    group_id: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    policy_version: Mapped[int] = mapped_column(Integer, default=0)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    key_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())

    run: Mapped[RunRow | None] = relationship(back_populates="sessions", lazy="raise")
    steps: Mapped[list[StepRow]] = relationship(
        back_populates="session", lazy="raise", order_by="StepRow.index", cascade="all, delete-orphan"
    )


class StepRow(Base):
    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("session_id", "index", name="uq_steps_session_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    parent_index: Mapped[int | None] = mapped_column(Integer)
    policy_version: Mapped[int] = mapped_column(Integer, default=0)
    backend: Mapped[str] = mapped_column(String(64), default="")
    model: Mapped[str] = mapped_column(String(255), default="")
    model_path: Mapped[str | None] = mapped_column(Text)  # the served model's directory (migration 0004)
    trainable: Mapped[bool] = mapped_column(Boolean, default=True)
    observation_ids: Mapped[bytes | None] = mapped_column(LargeBinary)
    action_ids: Mapped[bytes | None] = mapped_column(LargeBinary)
    action_logprobs: Mapped[bytes | None] = mapped_column(LargeBinary)
    messages_sent: Mapped[list[Any]] = mapped_column(JSON, default=list)
    messages_seen: Mapped[list[Any]] = mapped_column(JSON, default=list)
    tools: Mapped[list[Any] | None] = mapped_column(JSON)
    sampling: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    action: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    feedback_messages: Mapped[list[Any] | None] = mapped_column(JSON)
    feedback_ids: Mapped[bytes | None] = mapped_column(LargeBinary)
    drift: Mapped[bool] = mapped_column(Boolean, default=False)
    retry_of: Mapped[list[Any] | None] = mapped_column(JSON)  # indices of the attempts this client retry replaced
    # {"step": j, "sent": k, "seen": m}: the leading messages shared with step j (store/history.py); None: whole
    shared_history: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)

    session: Mapped[SessionRow] = relationship(back_populates="steps", lazy="raise")


class RewardRow(Base):
    __tablename__ = "rewards"
    __table_args__ = (Index("ix_rewards_session_step", "session_id", "step_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    step_index: Mapped[int | None] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(255), default="reward")
    value: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(32), default="agent")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
