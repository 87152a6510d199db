"""A session's branches and drift, from its stored steps (``GET /sessions/{id}`` -> ``branches``).

A step extends the branch whose last step is its parent when it continues that step token for token (not
``drift``). Any other step starts a branch: ``root`` (no parent: a conversation that starts there, e.g. a
sub-agent), ``fork`` (it continues an earlier step than the branch's last, or is a later sibling of one: a
resample, a retry with an edited history, a second choice taken), or ``drift`` (its history was rewritten,
by the agent or the session's context policy, so it is rendered afresh). Steps a client retry superseded
are listed apart: they are not part of any trajectory the agent followed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["branch_report"]


def branch_report(steps: Sequence[Any]) -> dict[str, Any]:
    superseded = sorted({i for s in steps for i in (s.retry_of or [])})
    branches: list[dict[str, Any]] = []
    branch_of_tip: dict[int, dict[str, Any]] = {}  # the index of a branch's last step -> the branch
    for step in sorted(steps, key=lambda s: s.index):
        if step.index in superseded:
            continue
        branch = branch_of_tip.pop(step.parent_index, None) if step.parent_index is not None and not step.drift \
            else None
        if branch is None:
            kind = "drift" if step.drift else ("root" if step.parent_index is None else "fork")
            branch = {"id": len(branches), "kind": kind, "parent_step": step.parent_index, "steps": []}
            branches.append(branch)
        branch["steps"].append(step.index)
        branch_of_tip[step.index] = branch
    return {"branches": branches, "drift_steps": [s.index for s in steps if s.drift],
            "superseded_steps": superseded}
