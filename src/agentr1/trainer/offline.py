"""Training on sessions already in a store: collected earlier, by any gateway, rewarded later.

The selection (run, statuses, policy versions, time window) is streamed in task groups; each
training step takes the next `data.train_batch_size` groups. The update corrects for the policy
that sampled them with importance weights from the recorded logprobs (verl's rollout correction,
`rollout_is="token"`). The cursor is part of the checkpoint, so a resumed run never trains twice
on the same sessions.
"""

from __future__ import annotations

import datetime as dt
import itertools

from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.config import StoreSelection
from agentr1.trainer.rewards import RewardConfig, SessionRewards, assemble_session_rewards
from agentr1.trainer.sources import StepData, StepSource, TrainerContext

__all__ = ["OfflineSource", "OfflineSteps", "select_groups"]


def select_groups(store: TraceStore, sel: StoreSelection, *, as_of: dt.datetime | None = None
                  ) -> list[list[SessionRecord]]:
    """The selection in task groups; with ``as_of``, as it was then (sessions created or ended later are
    left out), so a resumed run sees the same groups in the same order however the store grew."""
    after = dt.datetime.fromisoformat(sel.created_after) if sel.created_after else None
    before = dt.datetime.fromisoformat(sel.created_before) if sel.created_before else None
    groups = []
    for group in store.iter_groups(sel.run_id, statuses=tuple(sel.statuses), min_policy_version=sel.min_policy_version,
                                   max_policy_version=sel.max_policy_version):
        kept = [s for s in group if _in_window(s, after, before) and _existed(s, as_of)]
        if kept:
            groups.append(kept)
    return groups


def _in_window(session: SessionRecord, after: dt.datetime | None, before: dt.datetime | None) -> bool:
    created = session.created_at
    if created is None:
        return True
    if after is not None and created < after.astimezone(dt.UTC):
        return False
    return not (before is not None and created >= before.astimezone(dt.UTC))


def _existed(session: SessionRecord, as_of: dt.datetime | None) -> bool:
    if as_of is None:
        return True
    moment = as_of.astimezone(dt.UTC)
    return all(t is None or t <= moment for t in (session.created_at, session.finished_at))


class OfflineSource:
    """The selected task groups, handed out ``batch_size`` groups per training step."""

    def __init__(self, sel: StoreSelection, batch_size: int, reward_config: RewardConfig, *,
                 as_of: dt.datetime | None = None) -> None:
        with TraceStore.open(sel.db, migrate=False) as source:
            self.groups = select_groups(source, sel, as_of=as_of)
        if not self.groups:
            raise ValueError(f"the offline selection matched no sessions in {sel.db} (run {sel.run_id!r}, "
                             f"statuses {sel.statuses})")
        self.batch_size = batch_size
        self.reward_config = reward_config

    def take(self, cursor: int) -> tuple[list[SessionRecord], dict[str, SessionRewards], dict[str, float]]:
        """The groups after ``cursor`` (wrapping around: one pass over the selection is one epoch)."""
        start = cursor % len(self.groups)
        chosen = list(itertools.islice(itertools.cycle(self.groups), start, start + self.batch_size))
        sessions = [s for g in chosen for s in g]
        rewards = {s.id: assemble_session_rewards(s, None, self.reward_config) for s in sessions}
        outcomes = [r.outcome for r in rewards.values()]
        return sessions, rewards, {
            "offline/groups": float(len(chosen)), "offline/sessions": float(len(sessions)),
            "offline/epoch": (cursor + len(chosen)) / len(self.groups),
            "reward/mean": sum(outcomes) / len(outcomes) if outcomes else 0.0,
        }


class OfflineSteps(StepSource):
    """The training loop's ``offline`` source: the next groups of the selection at the trainer's
    checkpointed cursor (``progress.offline_cursor``)."""

    def __init__(self, trainer: TrainerContext, selection: OfflineSource) -> None:
        super().__init__(trainer)
        self.selection = selection

    async def take(self, step: int) -> StepData:
        progress = self.trainer.run.progress
        sessions, rewards, metrics = self.selection.take(progress.offline_cursor)
        progress.offline_cursor += self.selection.batch_size
        return StepData(sessions, rewards, metrics)
