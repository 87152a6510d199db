"""A task group side by side: the n samples of one task with their rewards and the advantages the
trainer would compute for them.

The viewer imports no trainer: the advantages come from an :class:`AdvantageSource` it is handed
(``create_viewer_app(advantages=...)``; ``agentr1 view`` hands it the trainer's ``GroupAdvantages``). Without one,
or without the trainer's dependencies, the page shows rewards only."""

from __future__ import annotations

from typing import Protocol

from agentr1.store import SessionRecord, TraceStore
from agentr1.viewer.queries import list_sessions
from agentr1.viewer.schemas import GroupSample, GroupView

MAX_GROUP = 256
TRAINED_STATUSES = ("finished",)  # the trainer drops failed and timed-out rollouts, never trains on them
NO_SOURCE = ("advantages need the trainer: `agentr1 view` computes them with it "
             "(`pip install 'agentr1[trainer]'`)")


class Advantages(Protocol):
    """Per session id: its return, and {step index: the mean advantage of its action tokens, -1: over all}."""

    returns: dict[str, float]
    per_step: dict[str, dict[int, float]]
    note: str | None  # why there are none (an unknown estimator, a failure)


class AdvantageSource(Protocol):
    """Computes advantages from stored sessions (the trainer's ``GroupAdvantages``)."""

    def estimators(self) -> list[str]:
        """The estimators it can compute from stored traces alone (no critic)."""
        ...

    def of_sessions(self, sessions: list[SessionRecord], estimator: str) -> Advantages: ...


def estimators(source: AdvantageSource | None) -> list[str]:
    """The estimators ``source`` can compute (none without a source or the trainer's dependencies)."""
    try:
        return source.estimators() if source is not None else []
    except ImportError:
        return []


def group_view(store: TraceStore, group_id: str, run_id: str | None, estimator: str,
               source: AdvantageSource | None) -> GroupView:
    summaries, _ = list_sessions(store, run_id=run_id, group_id=group_id, sort="created", order="asc",
                                 limit=MAX_GROUP)
    records = {s.id: store.get_session(s.id) for s in summaries}
    advantages, returns, note = _advantages([records[s.id] for s in summaries], estimator, source)
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
    return GroupView(group_id=group_id, run_id=run, estimator=estimator, estimators=estimators(source),
                     advantages=note is None, note=note, samples=samples)


def _advantages(records: list[SessionRecord], estimator: str, source: AdvantageSource | None
                ) -> tuple[dict[str, dict[int, float]], dict[str, float], str | None]:
    """Per session: {step index: mean advantage of its action tokens, -1: mean over all}, its return; or why not."""
    if source is None:
        return {}, {}, NO_SOURCE
    try:
        computed = source.of_sessions([r for r in records if r.status in TRAINED_STATUSES], estimator)
    except ImportError as exc:
        return {}, {}, f"advantages need the trainer's dependencies (`pip install 'agentr1[trainer]'`): {exc}"
    return computed.per_step, computed.returns, computed.note
