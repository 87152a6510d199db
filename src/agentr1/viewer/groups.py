"""A task group side by side: the n samples of one task with their rewards and the advantages the
trainer would compute for them (``build_rows`` + ``compute_advantages``, imported lazily: without
the trainer's dependencies the page shows rewards only)."""

from __future__ import annotations

import logging
from typing import Any

from agentr1.store import SessionRecord, TraceStore
from agentr1.viewer.queries import list_sessions
from agentr1.viewer.schemas import GroupSample, GroupView

log = logging.getLogger("agentr1.viewer")

MAX_GROUP = 256
TRAINED_STATUSES = ("finished",)  # the trainer drops failed and timed-out rollouts, never trains on them


def estimators() -> list[str]:
    """Estimators that need no critic (those can be computed from the stored traces alone)."""
    try:
        from agentr1.trainer.algorithms import get_adv_estimator, list_adv_estimators
    except ImportError:
        return []
    return [name for name in list_adv_estimators() if not get_adv_estimator(name).needs_values]


def group_view(store: TraceStore, group_id: str, run_id: str | None, estimator: str) -> GroupView:
    summaries, _ = list_sessions(store, run_id=run_id, group_id=group_id, sort="created", order="asc",
                                 limit=MAX_GROUP)
    records = {s.id: store.get_session(s.id) for s in summaries}
    advantages, returns, note = _advantages([records[s.id] for s in summaries], estimator)
    samples = []
    for summary in summaries:
        record = records[summary.id]
        steps = sorted(record.steps, key=lambda s: s.index)
        per_step = advantages.get(summary.id, {})
        samples.append(GroupSample(
            session=summary, trained=summary.id in returns,
            trajectory_return=returns.get(summary.id),
            advantage=per_step.get(-1), step_advantages={k: v for k, v in per_step.items() if k >= 0},
            final_answer=(steps[-1].action or {}).get("content") if steps else None,
        ))
    run = run_id or (summaries[0].run_id if summaries else None)
    return GroupView(group_id=group_id, run_id=run, estimator=estimator, estimators=estimators(),
                     advantages=note is None, note=note, samples=samples)


def _advantages(records: list[SessionRecord], estimator: str
                ) -> tuple[dict[str, dict[int, float]], dict[str, float], str | None]:
    """Per session: {step index: mean advantage of its action tokens, -1: mean over all}, its return."""
    trained = [r for r in records if r.status in TRAINED_STATUSES]
    try:
        from agentr1.trainer import BatchConfig, build_rows
        from agentr1.trainer.algorithms import AdvantageConfig, compute_advantages
    except ImportError as exc:
        return {}, {}, f"advantages need the trainer's dependencies (`pip install 'agentr1[trainer]'`): {exc}"
    rows = build_rows(trained, BatchConfig(layout="merged")).rows
    returns: dict[str, float] = {}
    for row in rows:
        returns[row.session_id] = returns.get(row.session_id, 0.0) + sum(row.token_rewards)
    if estimator not in estimators():
        return {}, returns, f"unknown or critic-based estimator {estimator!r}; choose one of {estimators()}"
    try:
        compute_advantages(rows, AdvantageConfig(adv_estimator=estimator))
    except Exception as exc:
        log.warning("advantages (%s) failed: %s", estimator, exc)
        return {}, returns, f"{estimator} failed: {exc}"
    return _per_step(rows), returns, None


def _per_step(rows: list[Any]) -> dict[str, dict[int, float]]:
    sums: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        steps = sums.setdefault(row.session_id, {})
        for seg in row.segments:
            values = [a for a, m in zip(row.advantages[seg.start:seg.end], row.response_mask[seg.start:seg.end],
                                        strict=True) if m]
            steps.setdefault(seg.step_index, []).extend(values)
            steps.setdefault(-1, []).extend(values)
    return {sid: {k: sum(v) / len(v) for k, v in steps.items() if v} for sid, steps in sums.items()}

