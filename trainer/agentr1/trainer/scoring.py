"""The reward stage of a rollout: run the environment's reward functions (and the judge) over the
finished sessions, store their results (source "environment", or "judge"), and assemble r_t for
every step.

A reward source that cannot score a session (a judge whose reply does not parse, or whose budget is
spent with ``over_budget: skip``) stores nothing for it and is recorded in
``SessionRewards.failures``: the group stage (``agentr1.trainer.groups``) then leaves the session
out of training instead of training it as a zero reward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.config import RewardSection
from agentr1.trainer.rewards import RewardConfig, SessionRewards, assemble_session_rewards

__all__ = ["build_reward_fns", "score_sessions"]


def build_reward_fns(section: RewardSection, store: TraceStore, run_id: str) -> dict[str, Callable[..., Any]]:
    """The job's reward functions by name (``module:function``), and the judge (``reward.judge``) under its name."""
    from agentr1.trainer.tasks import load_callable

    fns: dict[str, Callable[..., Any]] = {spec: load_callable(spec) for spec in section.functions}
    if section.judge is not None:
        from agentr1.trainer.judge import Judge

        if section.judge.name in fns:
            raise ValueError(f"reward.judge.name {section.judge.name!r} is also a reward function's name")
        fns[section.judge.name] = Judge(section.judge, store, run_id)
    return fns


def score_sessions(store: TraceStore, session_ids: list[str], tasks: dict[str, dict[str, Any]],
                   reward_fns: dict[str, Callable[..., Any]], config: RewardConfig,
                   ) -> tuple[list[SessionRecord], dict[str, SessionRewards]]:
    from agentr1.trainer.judge import JudgeFailure

    sessions = []
    failures: dict[str, dict[str, str]] = {}
    for sid in session_ids:
        session = store.get_session(sid)
        if session.status == "finished" and reward_fns:
            for spec, fn in reward_fns.items():
                source = getattr(fn, "source", "environment")
                try:
                    value = fn(session, tasks.get(session.task_id or "", {}))
                except JudgeFailure as exc:
                    failures.setdefault(sid, {})[spec] = str(exc)
                    continue
                if isinstance(value, dict):
                    for index, v in value.items():
                        store.add_reward(sid, float(v), name=spec, step=int(index), source=source)
                else:
                    store.add_reward(sid, float(value), name=spec, source=source)
            session = store.get_session(sid)
        sessions.append(session)
    rewards = {s.id: assemble_session_rewards(s, None, config) for s in sessions}
    for sid, failed in failures.items():
        rewards[sid].failures.update(failed)
    return sessions, rewards
