"""Filtered, sorted, counted listings over the trace tables, for browsing (the viewer, dashboards): read-only.

A session's reward is the sum of its session-level rewards, as everywhere in the store API. Parts above the
store read these records; no SQL lives outside ``agentr1.store``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agentr1.store.schema import RewardRow, RunRow, SessionRow, StepRow
from agentr1.store.store import TraceStore

__all__ = [
    "GroupStats",
    "SessionListing",
    "VersionCount",
    "browse_sessions",
    "count_runs",
    "group_stats",
    "status_counts",
    "version_counts",
]

SortKey = Literal["created", "reward", "steps"]
Order = Literal["asc", "desc"]


@dataclass(frozen=True)
class SessionListing:
    """One session in a listing: its fields, its reward and its number of steps (no steps themselves)."""

    id: str
    run_id: str | None
    task_id: str | None
    group_id: str | None
    status: str
    policy_version: int
    reward: float | None
    n_steps: int
    created_at: dt.datetime | None
    finished_at: dt.datetime | None
    error: str | None


@dataclass(frozen=True)
class VersionCount:
    """A policy version that sampled steps of a run, with how many sessions and steps."""

    version: int
    sessions: int
    steps: int


@dataclass(frozen=True)
class GroupStats:
    """A task group of a run (sessions sharing a group id) with its reward statistics."""

    group_id: str
    task_id: str | None
    n: int
    mean_reward: float | None
    min_reward: float | None
    max_reward: float | None


def _outcome() -> Any:
    return (select(func.sum(RewardRow.value))
            .where(RewardRow.session_id == SessionRow.id, RewardRow.step_index.is_(None))
            .correlate(SessionRow).scalar_subquery())


def _n_steps() -> Any:
    return (select(func.count(StepRow.id)).where(StepRow.session_id == SessionRow.id)
            .correlate(SessionRow).scalar_subquery())


def count_runs(store: TraceStore) -> int:
    with Session(store.engine) as db:
        return int(db.scalar(select(func.count(RunRow.id))) or 0)


def browse_sessions(store: TraceStore, *, run_id: str | None = None, status: list[str] | None = None,
                    group_id: str | None = None, task_id: str | None = None, min_reward: float | None = None,
                    max_reward: float | None = None, sort: SortKey = "created", order: Order = "desc",
                    limit: int = 50, offset: int = 0) -> tuple[list[SessionListing], int]:
    """A page of the sessions that match the filters, sorted (ties by id), and how many match in all."""
    reward, n_steps = _outcome().label("reward"), _n_steps().label("n_steps")
    conditions: list[Any] = []
    if run_id is not None:
        conditions.append(SessionRow.run_id == run_id)
    if status:
        conditions.append(SessionRow.status.in_(status))
    if group_id is not None:
        conditions.append(SessionRow.group_id == group_id)
    if task_id is not None:
        conditions.append(SessionRow.task_id == task_id)
    if min_reward is not None:
        conditions.append(_outcome() >= min_reward)
    if max_reward is not None:
        conditions.append(_outcome() <= max_reward)
    key = {"created": SessionRow.created_at, "reward": reward, "steps": n_steps}[sort]
    ordered = key.desc() if order == "desc" else key.asc()
    query = (select(SessionRow, reward, n_steps).where(*conditions).order_by(ordered.nulls_last(), SessionRow.id)
             .limit(limit).offset(offset))
    with Session(store.engine) as db:
        total = int(db.scalar(select(func.count(SessionRow.id)).where(*conditions)) or 0)
        rows = db.execute(query).all()
    return [SessionListing(id=row.id, run_id=row.run_id, task_id=row.task_id, group_id=row.group_id,
                           status=row.status, policy_version=row.policy_version, reward=r, n_steps=n or 0,
                           created_at=row.created_at, finished_at=row.finished_at, error=row.error)
            for row, r, n in rows], total


def status_counts(store: TraceStore, run_id: str) -> dict[str, int]:
    """How many of the run's sessions are in each status."""
    query = (select(SessionRow.status, func.count(SessionRow.id)).where(SessionRow.run_id == run_id)
             .group_by(SessionRow.status))
    with Session(store.engine) as db:
        return {status: int(n) for status, n in db.execute(query)}


def version_counts(store: TraceStore, run_id: str) -> list[VersionCount]:
    """The policy versions that sampled the run's steps, with how many sessions and steps each."""
    query = (select(StepRow.policy_version, func.count(func.distinct(StepRow.session_id)), func.count(StepRow.id))
             .join(SessionRow, SessionRow.id == StepRow.session_id)
             .where(SessionRow.run_id == run_id).group_by(StepRow.policy_version).order_by(StepRow.policy_version))
    with Session(store.engine) as db:
        return [VersionCount(version=v, sessions=s, steps=n) for v, s, n in db.execute(query)]


def group_stats(store: TraceStore, run_id: str, limit: int, offset: int) -> tuple[list[GroupStats], int]:
    """Task groups of a run, newest first, with reward statistics; and how many groups in all."""
    outcome = _outcome().label("reward")
    per_session = (select(SessionRow.group_id.label("gid"), SessionRow.task_id.label("task"),
                          SessionRow.created_at.label("created"), outcome)
                   .where(SessionRow.run_id == run_id, SessionRow.group_id.is_not(None)).subquery())
    query = (select(per_session.c.gid, func.min(per_session.c.task), func.count(), func.avg(per_session.c.reward),
                    func.min(per_session.c.reward), func.max(per_session.c.reward))
             .group_by(per_session.c.gid).order_by(func.max(per_session.c.created).desc(), per_session.c.gid)
             .limit(limit).offset(offset))
    with Session(store.engine) as db:
        total = int(db.scalar(select(func.count(func.distinct(per_session.c.gid)))) or 0)
        rows = db.execute(query).all()
    return [GroupStats(group_id=g, task_id=t, n=n, mean_reward=mean, min_reward=lo, max_reward=hi)
            for g, t, n, mean, lo, hi in rows], total
