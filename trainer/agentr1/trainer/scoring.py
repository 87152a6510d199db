"""The reward stage of a rollout: run the environment's reward functions over the finished
sessions, store their results (source "environment"), and assemble r_t for every step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.rewards import RewardConfig, SessionRewards, assemble_session_rewards


def score_sessions(store: TraceStore, session_ids: list[str], tasks: dict[str, dict[str, Any]],
                   reward_fns: dict[str, Callable[..., Any]], config: RewardConfig,
                   ) -> tuple[list[SessionRecord], dict[str, SessionRewards]]:
    sessions = []
    for sid in session_ids:
        session = store.get_session(sid)
        if session.status == "finished" and reward_fns:
            for spec, fn in reward_fns.items():
                value = fn(session, tasks.get(session.task_id or "", {}))
                if isinstance(value, dict):
                    for index, v in value.items():
                        store.add_reward(sid, float(v), name=spec, step=int(index), source="environment")
                else:
                    store.add_reward(sid, float(value), name=spec, source="environment")
            session = store.get_session(sid)
        sessions.append(session)
    return sessions, {s.id: assemble_session_rewards(s, None, config) for s in sessions}
