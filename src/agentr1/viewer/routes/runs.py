"""Runs: the list, one run (status counts, policy versions, trainer output folder), its training
metrics from metrics.jsonl, and its task groups."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from agentr1.store import UnknownRun
from agentr1.viewer import queries
from agentr1.viewer.runs_dir import metric_keys, read_metrics
from agentr1.viewer.schemas import GroupSummary, MetricsSeries, Page, RunDetail, RunSummary
from agentr1.viewer.state import ViewerState, not_found, viewer

router = APIRouter(prefix="/runs", tags=["runs"])


def _summary(state: ViewerState, run_id: str) -> RunSummary:
    try:
        r = state.store.get_run(run_id)
    except UnknownRun as exc:
        raise not_found(f"unknown run {run_id!r}") from exc
    return RunSummary(id=r.id, name=r.name, created_at=r.created_at, n_sessions=r.n_sessions, n_steps=r.n_steps,
                      mean_reward=r.mean_reward)


@router.get("", response_model=Page[RunSummary])
def list_runs(request: Request, limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0)) -> Page[RunSummary]:
    items, total = queries.list_runs(viewer(request).store, limit, offset)
    return Page[RunSummary](items=items, total=total, limit=limit, offset=offset)


@router.get("/{run_id}", response_model=RunDetail)
def get_run(run_id: str, request: Request) -> RunDetail:
    state = viewer(request)
    run = _summary(state, run_id)
    out, matched_by = state.runs.match(run.id, run.name)
    return RunDetail(
        run=run, config=state.store.get_run(run_id).config or {},
        status_counts=queries.status_counts(state.store, run_id),
        policy_versions=queries.policy_versions(state.store, run_id),
        out_dir=str(out.path) if out else None, matched_by=matched_by,
    )


@router.get("/{run_id}/metrics", response_model=MetricsSeries)
def run_metrics(run_id: str, request: Request) -> MetricsSeries:
    """The trainer's per-step metrics of this run (empty without --runs-dir or a matching folder)."""
    state = viewer(request)
    run = _summary(state, run_id)
    out, _ = state.runs.match(run.id, run.name)
    if out is None:
        return MetricsSeries(run_id=run_id)
    points = read_metrics(out.metrics_path)
    return MetricsSeries(run_id=run_id, out_dir=str(out.path), keys=metric_keys(points), points=points)


@router.get("/{run_id}/groups", response_model=Page[GroupSummary])
def run_groups(run_id: str, request: Request, limit: int = Query(50, ge=1, le=500),
               offset: int = Query(0, ge=0)) -> Page[GroupSummary]:
    state = viewer(request)
    _summary(state, run_id)
    items, total = queries.list_groups(state.store, run_id, limit, offset)
    return Page[GroupSummary](items=items, total=total, limit=limit, offset=offset)
