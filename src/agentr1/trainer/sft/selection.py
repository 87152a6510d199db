"""Which stored sessions are demonstrations: by run, status, return, best-of-n per group.

A session's return is its outcome reward plus its step rewards, as stored (reward functions of
``agentr1 train``/``eval`` give outcomes, environments driven by ``AgentEnvLoop`` step rewards).
Rejection sampling and best-of-n are this selection over the policy's own rollouts:
``min_reward`` keeps the sessions whose return reaches it, ``best_per_group`` the k best of each
task group (``group_by: task`` compares all samples of a
task across the selected runs). A teacher's sessions (external model, text steps) and replayed
expert demonstrations are selected the same way, by their runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agentr1.store import SessionRecord, TraceStore, UnknownRun
from agentr1.trainer.sft.config import SFTData

__all__ = ["Selection", "select_demonstrations", "session_return"]


@dataclass
class Selection:
    sessions: list[SessionRecord]
    returns: dict[str, float | None]  # session id -> return (outcome + step rewards; None: no reward)
    metrics: dict[str, int] = field(default_factory=dict)


def select_demonstrations(store: TraceStore, data: SFTData) -> Selection:
    """The sessions ``data`` selects, in store order within each group; raises ValueError when a
    named run does not exist or nothing is selected (a typo must not train on nothing)."""
    run_ids: list[str | None] = list(dict.fromkeys(data.run_ids)) or [None]
    for run_id in run_ids:
        if run_id is not None:
            try:
                store.get_run(run_id)
            except UnknownRun:
                raise ValueError(f"data.run_ids: no run {run_id!r} in {data.db}") from None
    counts: Counter[str] = Counter(dict.fromkeys(("sessions_in", "sessions_below_min_reward", "sessions_not_best_in_group"), 0))
    groups: dict[str, list[tuple[float | None, SessionRecord]]] = {}
    for run_id in run_ids:
        for session in store.iter_sessions(run_id, statuses=tuple(data.statuses)):
            counts["sessions_in"] += 1
            value = session_return(session)
            if data.min_reward is not None and (value is None or value < data.min_reward):
                counts["sessions_below_min_reward"] += 1
                continue
            key = (session.group_id or session.id) if data.group_by == "group" else (session.task_id or session.id)
            groups.setdefault(key, []).append((value, session))
    chosen: list[tuple[float | None, SessionRecord]] = []
    for members in groups.values():
        if data.best_per_group:
            ranked = sorted(members, key=lambda m: -m[0] if m[0] is not None else float("inf"))  # stable on ties
            counts["sessions_not_best_in_group"] += max(0, len(members) - data.best_per_group)
            members = ranked[: data.best_per_group]
        chosen.extend(members)
    counts["groups"] = len(groups)
    counts["sessions_selected"] = len(chosen)
    if not chosen:
        raise ValueError(f"the selection matched no sessions in {data.db} (runs {data.run_ids or 'all'}, statuses "
                         f"{data.statuses}, min_reward {data.min_reward}): {dict(counts)}")
    return Selection([s for _, s in chosen], {s.id: value for value, s in chosen}, dict(counts))


def session_return(session: SessionRecord) -> float | None:
    """Outcome reward + step rewards as stored; None when the session has no reward at all."""
    steps = [s.reward for s in session.steps if s.reward is not None]
    if session.reward is None and not steps:
        return None
    return (session.reward or 0.0) + sum(steps)
