"""Read-only queries the store API has no call for: filtered, sorted, counted listings for the viewer.

They read the trace tables defined in :mod:`agentr1.store.schema` through the store's engine and
never write. A session's reward is the sum of its session-level rewards, as in the store API.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agentr1.store import SessionRecord, TraceStore
from agentr1.store.schema import RewardRow, RunRow, SessionRow, StepRow
from agentr1.viewer.schemas import (
    GroupSummary,
    Order,
    PolicyVersionCount,
    RunSummary,
    SessionSummary,
    SortKey,
)


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


def list_runs(store: TraceStore, limit: int, offset: int) -> tuple[list[RunSummary], int]:
    runs = store.list_runs(limit=offset + limit)[offset:]
    items = [RunSummary(id=r.id, name=r.name, created_at=r.created_at, n_sessions=r.n_sessions, n_steps=r.n_steps,
                        mean_reward=r.mean_reward) for r in runs]
    return items, count_runs(store)


def list_sessions(
    store: TraceStore,
    *,
    run_id: str | None = None,
    status: list[str] | None = None,
    group_id: str | None = None,
    task_id: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    sort: SortKey = "created",
    order: Order = "desc",
    limit: int = 50,
    offset: int = 0,
) -> tuple[list[SessionSummary], int]:
    reward, n_steps = _outcome().label("reward"), _n_steps().label("n_steps")
    query = select(SessionRow, reward, n_steps)
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
    query = query.where(*conditions).order_by(ordered.nulls_last(), SessionRow.id).limit(limit).offset(offset)
    with Session(store.engine) as db:
        total = int(db.scalar(select(func.count(SessionRow.id)).where(*conditions)) or 0)
        rows = db.execute(query).all()
    return [_summary(row, r, n) for row, r, n in rows], total


def _summary(row: SessionRow, reward: float | None, n_steps: int | None) -> SessionSummary:
    return SessionSummary(id=row.id, run_id=row.run_id, task_id=row.task_id, group_id=row.group_id, status=row.status,
                          policy_version=row.policy_version, reward=reward, n_steps=n_steps or 0,
                          created_at=row.created_at, finished_at=row.finished_at, error=row.error)


def summary_of(record: SessionRecord) -> SessionSummary:
    return SessionSummary(id=record.id, run_id=record.run_id, task_id=record.task_id, group_id=record.group_id,
                          status=record.status, policy_version=record.policy_version, reward=record.reward,
                          n_steps=record.n_steps, created_at=record.created_at, finished_at=record.finished_at,
                          error=record.error)


def status_counts(store: TraceStore, run_id: str) -> dict[str, int]:
    query = select(SessionRow.status, func.count(SessionRow.id)).where(SessionRow.run_id == run_id).group_by(
        SessionRow.status)
    with Session(store.engine) as db:
        return {status: int(n) for status, n in db.execute(query)}


def policy_versions(store: TraceStore, run_id: str) -> list[PolicyVersionCount]:
    """The policy versions that sampled the run's steps, with how many sessions and steps each."""
    query = (select(StepRow.policy_version, func.count(func.distinct(StepRow.session_id)), func.count(StepRow.id))
             .join(SessionRow, SessionRow.id == StepRow.session_id)
             .where(SessionRow.run_id == run_id).group_by(StepRow.policy_version).order_by(StepRow.policy_version))
    with Session(store.engine) as db:
        return [PolicyVersionCount(version=v, sessions=s, steps=n) for v, s, n in db.execute(query)]


def list_groups(store: TraceStore, run_id: str, limit: int, offset: int) -> tuple[list[GroupSummary], int]:
    """Task groups of a run (sessions sharing a group id), newest first, with reward statistics."""
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
    return [GroupSummary(group_id=g, task_id=t, n=n, mean_reward=mean, min_reward=lo, max_reward=hi)
            for g, t, n, mean, lo, hi in rows], total
