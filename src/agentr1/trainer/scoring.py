"""The reward stage of a rollout, in one place: run the environment's reward functions (and the judge)
over the finished sessions, store their results (source "environment", or "judge"), assemble r_t for
every step, and summarise the outcomes (:func:`outcome_metrics`).

:meth:`Scorer.score` reads the sessions once (one store read for all of them), calls the reward
functions, writes all their rewards in one store batch (``TraceStore.add_rewards``: all or none) and
returns the sessions as the store would now read them (``SessionRecord.apply_rewards``) with their
assembled rewards: no second read.

A reward source that cannot score a session (a judge whose reply does not parse, or whose budget is
spent with ``over_budget: skip``) stores nothing for it and is recorded in
``SessionRewards.failures``: the group stage (``agentr1.trainer.groups``) then leaves the session
out of training instead of training it as a zero reward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentr1.sdk import INFRASTRUCTURE_KINDS, failure_kind_of_error
from agentr1.store import RewardRecord, SessionRecord, TraceStore
from agentr1.trainer.config import JobConfig, RewardSection
from agentr1.trainer.judge import Judge, JudgeFailure
from agentr1.trainer.rewards import RewardConfig, SessionRewards, assemble_session_rewards
from agentr1.trainer.rollout import RolloutReport
from agentr1.trainer.tasks import load_callable

__all__ = ["Scored", "Scorer", "answerable", "build_reward_fns", "outcome_metrics"]


def build_reward_fns(section: RewardSection, store: TraceStore, run_id: str) -> dict[str, Callable[..., Any]]:
    """The job's reward functions by name (``module:function``), and the judge (``reward.judge``) under its name."""
    fns: dict[str, Callable[..., Any]] = {spec: load_callable(spec) for spec in section.functions}
    if section.judge is not None:
        if section.judge.name in fns:
            raise ValueError(f"reward.judge.name {section.judge.name!r} is also a reward function's name")
        fns[section.judge.name] = Judge(section.judge, store, run_id)
    return fns


@dataclass
class Scorer:
    """The reward stage of a job: its reward functions (and judge) over finished sessions, stored."""

    store: TraceStore
    reward_fns: dict[str, Callable[..., Any]]
    reward_config: RewardConfig

    @classmethod
    def for_job(cls, job: JobConfig, store: TraceStore, run_id: str) -> Scorer:
        return cls(store, build_reward_fns(job.reward, store, run_id),
                   RewardConfig(outcome_placement=job.reward.outcome_placement))

    def score(self, session_ids: Sequence[str], tasks: dict[str, dict[str, Any]]
              ) -> tuple[list[SessionRecord], dict[str, SessionRewards]]:
        """The sessions (each read once), their reward functions' results stored in one batch, and every
        session's r_t. ``tasks``: the task of each session by task id (what reward functions are given)."""
        sessions = self.store.get_sessions(session_ids)
        given: dict[str, list[RewardRecord]] = {}
        failures: dict[str, dict[str, str]] = {}
        for session in sessions:
            if session.status != "finished" or not self.reward_fns:
                continue
            task = tasks.get(session.task_id or "", {})
            records = given.setdefault(session.id, [])
            for spec, fn in self.reward_fns.items():
                source = getattr(fn, "source", "environment")
                try:
                    value = fn(session, task)
                except JudgeFailure as exc:
                    failures.setdefault(session.id, {})[spec] = str(exc)
                    continue
                if isinstance(value, dict):
                    records += [RewardRecord(session.id, float(v), name=spec, step_index=int(index), source=source)
                                for index, v in value.items()]
                else:
                    records.append(RewardRecord(session.id, float(value), name=spec, source=source))
        self.store.add_rewards([r for records in given.values() for r in records])
        for session in sessions:
            session.apply_rewards(given.get(session.id, ()))
        rewards = {s.id: assemble_session_rewards(s, None, self.reward_config) for s in sessions}
        for sid, failed in failures.items():
            rewards[sid].failures.update(failed)
        return sessions, rewards

    def take_metrics(self) -> dict[str, float]:
        """The counters of reward sources that keep them (the judge's ``judge/*``) since the last call."""
        metrics: dict[str, float] = {}
        for fn in self.reward_fns.values():
            if hasattr(fn, "take_metrics"):
                metrics.update(fn.take_metrics())
        return metrics


@dataclass
class Scored:
    """A rollout's report and its sessions, scored (:meth:`Scorer.score`)."""

    report: RolloutReport
    sessions: list[SessionRecord]
    rewards: dict[str, SessionRewards]


def answerable(session: SessionRecord) -> bool:
    """Whether the policy is answerable for the session's outcome: it finished, or it failed for a reason other
    than the infrastructure (the SDK's failure kinds timeout, backend, environment, cancelled)."""
    return session.status == "finished" or failure_kind_of_error(session.error) not in INFRASTRUCTURE_KINDS


def outcome_metrics(sessions: Sequence[SessionRecord], rewards: dict[str, SessionRewards], *,
                    success_key: str, reward_key: str) -> dict[str, float]:
    """Success (the share of sessions with a positive outcome) and the mean outcome, over the sessions
    the policy is :func:`answerable` for: one that failed for an infrastructure reason is left out and counted
    under ``<success_key>/infra_failed``; any other session that did not finish counts as outcome 0. No
    sessions: both 0."""
    judged = [s for s in sessions if answerable(s)]
    outcomes = [rewards[s.id].outcome if s.status == "finished" else 0.0 for s in judged]
    n = max(1, len(outcomes))
    return {success_key: sum(o > 0 for o in outcomes) / n, reward_key: sum(outcomes) / n,
            f"{success_key}/infra_failed": float(len(sessions) - len(judged))}
