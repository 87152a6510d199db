"""The advantages the trainer would give the sessions of one task group, per step: what the viewer's group page shows.

The viewer imports no trainer; ``agentr1 view`` hands it a :class:`GroupAdvantages` (its ``advantages`` argument),
which builds the trainer's rows (:func:`~agentr1.trainer.batch.build_rows`, merged layout) and runs its advantage
estimators on them. Only estimators that need no critic can be computed from stored traces alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agentr1.store import SessionRecord
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.rows import TrainRow

__all__ = ["GroupAdvantages", "SessionAdvantages"]

log = logging.getLogger("agentr1.trainer")


@dataclass
class SessionAdvantages:
    """Per session id: the trajectory's return, and {step index: the mean advantage of its action tokens, -1: the
    mean over all of them}; ``note`` says why there are no advantages (an unknown estimator, a failure)."""

    returns: dict[str, float] = field(default_factory=dict)
    per_step: dict[str, dict[int, float]] = field(default_factory=dict)
    note: str | None = None


class GroupAdvantages:
    """The trainer's advantage estimators over stored sessions (the algorithms are imported on first use)."""

    def estimators(self) -> list[str]:
        """The estimators that need no critic."""
        from agentr1.trainer.algorithms import get_adv_estimator, list_adv_estimators

        return [name for name in list_adv_estimators() if not get_adv_estimator(name).needs_values]

    def of_sessions(self, sessions: list[SessionRecord], estimator: str) -> SessionAdvantages:
        """The returns and per-step advantages of ``sessions`` (those the trainer trains on) under ``estimator``."""
        from agentr1.trainer.algorithms import AdvantageConfig, compute_advantages

        rows = build_rows(sessions, BatchConfig(layout="merged")).rows
        out = SessionAdvantages()
        for row in rows:
            out.returns[row.session_id] = out.returns.get(row.session_id, 0.0) + sum(row.token_rewards)
        if estimator not in self.estimators():
            out.note = f"unknown or critic-based estimator {estimator!r}; choose one of {self.estimators()}"
            return out
        try:
            compute_advantages(rows, AdvantageConfig(adv_estimator=estimator))
        except Exception as exc:
            log.warning("advantages (%s) failed: %s", estimator, exc)
            out.note = f"{estimator} failed: {exc}"
            return out
        out.per_step = _per_step(rows)
        return out


def _per_step(rows: list[TrainRow]) -> dict[str, dict[int, float]]:
    sums: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        steps = sums.setdefault(row.session_id, {})
        for seg in row.segments:
            values = [a for a, m in zip(row.advantages[seg.start:seg.end], row.response_mask[seg.start:seg.end],
                                        strict=True) if m]
            steps.setdefault(seg.step_index, []).extend(values)
            steps.setdefault(-1, []).extend(values)
    return {sid: {k: sum(v) / len(v) for k, v in steps.items() if v} for sid, steps in sums.items()}
