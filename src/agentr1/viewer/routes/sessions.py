"""Sessions: filtered and sorted listings, one session step by step, and its training rows."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request

from agentr1.store import SESSION_STATUSES, SessionRecord, UnknownSession
from agentr1.viewer import queries
from agentr1.viewer.schemas import Order, Page, RowsView, SessionDetail, SessionSummary, SortKey
from agentr1.viewer.state import bad_request, not_found, viewer
from agentr1.viewer.tokens import session_detail, session_rows

router = APIRouter(prefix="/sessions", tags=["sessions"])


@router.get("", response_model=Page[SessionSummary])
def list_sessions(
    request: Request,
    run: str | None = Query(None, description="Only this run."),
    status: list[str] | None = Query(None, description="running, finished, failed, abandoned (repeatable)."),
    group: str | None = Query(None, description="Only this task group."),
    task: str | None = Query(None, description="Only this task."),
    min_reward: float | None = Query(None, description="Outcome reward at least this (unrewarded sessions excluded)."),
    max_reward: float | None = Query(None, description="Outcome reward at most this."),
    sort: SortKey = "created",
    order: Order = "desc",
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0),
) -> Page[SessionSummary]:
    statuses = [s for value in status or [] for s in value.split(",") if s]
    for s in statuses:
        if s not in SESSION_STATUSES:
            raise bad_request(f"unknown status {s!r}; valid: {', '.join(SESSION_STATUSES)}", "status")
    items, total = queries.list_sessions(
        viewer(request).store, run_id=run, status=statuses or None, group_id=group, task_id=task,
        min_reward=min_reward, max_reward=max_reward, sort=sort, order=order, limit=limit, offset=offset)
    return Page[SessionSummary](items=items, total=total, limit=limit, offset=offset)


def _record(request: Request, session_id: str) -> SessionRecord:
    try:
        return viewer(request).store.get_session(session_id)
    except UnknownSession as exc:
        raise not_found(f"unknown session {session_id!r}") from exc


@router.get("/{session_id}", response_model=SessionDetail)
def get_session(session_id: str, request: Request) -> SessionDetail:
    record = _record(request, session_id)
    return session_detail(record, queries.summary_of(record), viewer(request).tokenizers)


@router.get("/{session_id}/rows", response_model=RowsView)
def get_rows(session_id: str, request: Request, layout: Literal["merged", "per_step"] = "merged") -> RowsView:
    """The session as the trainer's rows, token by token with the training mask."""
    return session_rows(_record(request, session_id), layout, viewer(request).tokenizers)
