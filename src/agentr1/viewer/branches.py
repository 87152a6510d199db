"""A session's branch tree as the viewer shows it: the gateway's branch report (``agentr1.gateway.branch_report``:
which step each branch forks from and its own steps) with, for each branch, the path the model followed to its
last step (the parent chain of shared steps, then the branch's own) and its child branches."""

from __future__ import annotations

from collections.abc import Sequence

from agentr1.gateway import branch_report
from agentr1.store import StepRecord
from agentr1.viewer.schemas import BranchView

__all__ = ["session_branches"]


def session_branches(steps: Sequence[StepRecord]) -> tuple[list[BranchView], list[int]]:
    """(the session's branches in the order they started, the steps a client retry superseded)."""
    report = branch_report(steps)
    parent_of = {s.index: s.parent_index for s in steps}
    branch_of = {i: b["id"] for b in report["branches"] for i in b["steps"]}
    views = []
    for b in report["branches"]:
        shared: list[int] = []
        at = b["parent_step"]
        while at is not None and at not in shared:  # the parent chain back to a root (a cycle cannot be stored)
            shared.append(at)
            at = parent_of.get(at)
        views.append(BranchView(id=b["id"], kind=b["kind"], parent_step=b["parent_step"],
                                parent_branch=branch_of.get(b["parent_step"]) if b["parent_step"] is not None else None,
                                steps=b["steps"], path=[*reversed(shared), *b["steps"]]))
    for view in views:
        view.children = [c.id for c in views if c.parent_branch == view.id]
    return views, report["superseded_steps"]
