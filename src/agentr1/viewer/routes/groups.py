"""Task groups: the n samples of one task with rewards and the advantages the trainer would compute."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from agentr1.viewer.groups import estimators, group_view
from agentr1.viewer.schemas import GroupView
from agentr1.viewer.state import not_found, viewer

router = APIRouter(tags=["groups"])


@router.get("/estimators", response_model=list[str])
def list_estimators(request: Request) -> list[str]:
    """Advantage estimators computable from stored traces alone (no critic)."""
    return estimators(viewer(request).advantages)


@router.get("/groups/{group_id:path}", response_model=GroupView)
def get_group(group_id: str, request: Request, run: str | None = Query(None),
              estimator: str | None = Query(None, description="Default: the viewer's --estimator.")) -> GroupView:
    state = viewer(request)
    view = group_view(state.store, group_id, run, estimator or state.settings.estimator, state.advantages)
    if not view.samples:
        raise not_found(f"no sessions in group {group_id!r}" + (f" of run {run!r}" if run else ""))
    return view
