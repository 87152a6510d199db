"""The reward stage (``Scorer.score``) on a real SQLite trace store: the sessions are read once, every reward
function's result is written in one batch (all of it or none), and the sessions it returns are those the store
reads back, with the rewards assembled from them."""

from __future__ import annotations

from typing import Any

import pytest

from agentr1.store import SessionRecord, StepRecord, TraceStore, UnknownStep
from agentr1.trainer.rewards import RewardConfig, assemble_session_rewards
from agentr1.trainer.scoring import Scorer


class CountedStore:
    """The real store, counting the reads and reward writes the reward stage makes through it."""

    def __init__(self, store: TraceStore) -> None:
        self.store, self.calls = store, {"get_session": 0, "get_sessions": 0, "add_rewards": 0}

    def get_session(self, session_id: str) -> SessionRecord:
        self.calls["get_session"] += 1
        return self.store.get_session(session_id)

    def get_sessions(self, session_ids: list[str]) -> list[SessionRecord]:
        self.calls["get_sessions"] += 1
        return self.store.get_sessions(session_ids)

    def add_rewards(self, rewards: list[Any]) -> None:
        self.calls["add_rewards"] += 1
        self.store.add_rewards(rewards)


def step(session_id: str, index: int) -> StepRecord:
    return StepRecord(session_id=session_id, index=index, observation_ids=[1, 2, index + 3], action_ids=[7, 8],
                      action_logprobs=[-0.5, -0.25], action={"content": f"answer {index}"})


def sessions_with_steps(store: TraceStore) -> list[str]:
    """Two finished sessions of two steps (one rewarded by its agent), one failed session."""
    ids = [store.create_session(run_id="r", task_id=f"t{i}", group_id="g") for i in range(3)]
    store.append_steps([step(sid, i) for sid in ids for i in range(2)])
    store.finish_session(ids[0], reward=0.5)
    store.finish_session(ids[1])
    store.finish_session(ids[2], status="failed", error="agent: boom")
    return ids


def exact(session: SessionRecord, task: dict[str, Any]) -> float:
    return 1.0 if task.get("answer") == session.task_id else 0.0


def per_step(session: SessionRecord, task: dict[str, Any]) -> dict[int, float]:
    return {s.index: 0.25 * (s.index + 1) for s in session.steps}


def test_score_reads_once_writes_one_batch_and_returns_what_the_store_reads_back(tmp_path) -> None:
    with TraceStore.open(tmp_path / "traces.db") as store:
        ids = sessions_with_steps(store)
        counted = CountedStore(store)
        scorer = Scorer(counted, {"m:exact": exact, "m:per_step": per_step}, RewardConfig())  # type: ignore[arg-type]
        tasks = {"t0": {"answer": "t0"}, "t1": {"answer": "other"}}
        sessions, rewards = scorer.score(ids, tasks)
        assert counted.calls == {"get_session": 0, "get_sessions": 1, "add_rewards": 1}
        read_back = store.get_sessions(ids)
    for record in sessions + read_back:
        for reward in record.rewards:
            reward.created_at = None  # the database's clock
    assert sessions == read_back
    assert rewards == {s.id: assemble_session_rewards(s, None, RewardConfig()) for s in read_back}
    # the agent's 0.5 and exact's 1.0 on the first; per_step's rewards on both finished ones; nothing on the failed
    assert [(s.reward, [st.reward for st in s.steps]) for s in read_back] == [
        (1.5, [0.25, 0.5]), (0.0, [0.25, 0.5]), (None, [None, None])]
    assert rewards[ids[0]].steps == {0: 0.25, 1: 2.0}


def test_a_bad_reward_stores_nothing_of_any_session(tmp_path) -> None:
    """A reward function naming a step the session does not have fails the batch: no session keeps half its
    rewards (they were written one session at a time before)."""

    def beyond_the_last_step(session: SessionRecord, task: dict[str, Any]) -> dict[int, float]:
        return {0: 1.0} if session.task_id == "t0" else {5: 1.0}

    with TraceStore.open(tmp_path / "traces.db") as store:
        ids = sessions_with_steps(store)
        with pytest.raises(UnknownStep):
            Scorer(store, {"m:bad": beyond_the_last_step}, RewardConfig()).score(ids, {})
        assert [[r.name for r in s.rewards] for s in store.get_sessions(ids)] == [["outcome"], [], []]  # the agent's
