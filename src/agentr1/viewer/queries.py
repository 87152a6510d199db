"""The viewer's listings: the store's browse API (``agentr1.store.browse``) in the viewer's JSON shapes."""

from __future__ import annotations

import dataclasses

from agentr1.store import SessionRecord, TraceStore, browse
from agentr1.viewer.schemas import GroupSummary, Order, PolicyVersionCount, RunSummary, SessionSummary, SortKey

__all__ = ["list_groups", "list_runs", "list_sessions", "policy_versions", "status_counts", "summary_of"]


def list_runs(store: TraceStore, limit: int, offset: int) -> tuple[list[RunSummary], int]:
    runs = store.list_runs(limit=offset + limit)[offset:]
    items = [RunSummary(id=r.id, name=r.name, created_at=r.created_at, n_sessions=r.n_sessions, n_steps=r.n_steps,
                        mean_reward=r.mean_reward) for r in runs]
    return items, browse.count_runs(store)


def list_sessions(store: TraceStore, *, run_id: str | None = None, status: list[str] | None = None,
                  group_id: str | None = None, task_id: str | None = None, min_reward: float | None = None,
                  max_reward: float | None = None, sort: SortKey = "created", order: Order = "desc",
                  limit: int = 50, offset: int = 0) -> tuple[list[SessionSummary], int]:
    rows, total = browse.browse_sessions(store, run_id=run_id, status=status, group_id=group_id, task_id=task_id,
                                         min_reward=min_reward, max_reward=max_reward, sort=sort, order=order,
                                         limit=limit, offset=offset)
    return [SessionSummary(**dataclasses.asdict(row)) for row in rows], total


def summary_of(record: SessionRecord) -> SessionSummary:
    return SessionSummary(id=record.id, run_id=record.run_id, task_id=record.task_id, group_id=record.group_id,
                          status=record.status, policy_version=record.policy_version, reward=record.reward,
                          n_steps=record.n_steps, created_at=record.created_at, finished_at=record.finished_at,
                          error=record.error)


def status_counts(store: TraceStore, run_id: str) -> dict[str, int]:
    return browse.status_counts(store, run_id)


def policy_versions(store: TraceStore, run_id: str) -> list[PolicyVersionCount]:
    return [PolicyVersionCount(**dataclasses.asdict(v)) for v in browse.version_counts(store, run_id)]


def list_groups(store: TraceStore, run_id: str, limit: int, offset: int) -> tuple[list[GroupSummary], int]:
    groups, total = browse.group_stats(store, run_id, limit, offset)
    return [GroupSummary(**dataclasses.asdict(g)) for g in groups], total
