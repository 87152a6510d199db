"""Each recipe's own train.yaml, shrunk to one training step of a tiny model on CPU: the real agent or
environment through the real gateway and store, the recipe's rewards, and a verl update."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import Trainer

ROOT = Path(__file__).resolve().parents[2]


def _train_one_step(recipe: str, tmp_path: Path, model: Path, extra: list[str] | None = None) -> list[SessionRecord]:
    """Run ``examples/<recipe>/train.yaml`` for one step (2 tasks x 2 samples, 1 validation task);
    returns the training sessions of that step as stored."""
    overrides = [f"db=sqlite:///{tmp_path / 'traces.db'}", f"actor_rollout_ref.model={model}",
                 "data.train_batch_size=2", "data.val_size=1", "actor_rollout_ref.rollout.n=2",
                 "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path / 'out'}",
                 "trainer.device=cpu", *(extra or [])]
    trainer = Trainer(JobConfig.from_yaml(ROOT / "examples" / recipe / "train.yaml", overrides), quiet=True)
    trainer.setup()
    try:
        final = trainer.train()
        run_id = trainer.run.progress.run_id
    finally:
        trainer.close()
    assert final["policy_version"] == 1.0 and final["actor/optimizer_steps"] >= 1, final
    assert final["rollout/sessions"] == 4 and final["rollout/failed"] == 0, final
    history = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [0, 1] and "success/val" in history[-1]
    with TraceStore.open(tmp_path / "traces.db") as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions(run_id, limit=100)]
    assert len(sessions) == 4 and all(s.status == "finished" and s.steps for s in sessions)
    for s in sessions:
        assert all(st.observation_ids and st.action_ids and len(st.action_logprobs) == len(st.action_ids)
                   for st in s.steps)
    return sessions


def _rewards(session: SessionRecord, name: str) -> list[Any]:
    return [r for r in session.rewards if r.name == name and r.source == "environment"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_calculator_recipe_trains(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    sessions = _train_one_step("calculator", tmp_path, tiny_model_path)
    assert all(len(_rewards(s, "examples.calculator.calculator:exact_answer")) == 1 for s in sessions)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_hotpotqa_recipe_trains_with_its_sliding_window(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    sessions = _train_one_step("hotpotqa", tmp_path, tiny_model_path)
    for s in sessions:
        assert s.metadata["context"] == {"policy": "sliding_window", "keep_last_turns": 2}  # from agent.context
        (f1,) = _rewards(s, "examples.hotpotqa.rewards:f1_reward")
        assert 0.0 <= f1.value <= 1.0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_alfworld_recipe_trains_through_run_task(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    sessions = _train_one_step("alfworld", tmp_path, tiny_model_path, ["data.generator=short_games:make_tasks"])
    for s in sessions:
        assert 1 <= len(s.steps) <= 3  # max_steps of the short rows
        # every step carries the environment's process reward: 0, or the invalid-action penalty
        assert all(st.reward in (0.0, -0.1) for st in s.steps), [st.reward for st in s.steps]
        assert s.steps[0].messages_seen[0]["role"] == "system"
        assert "Your task is to:" in s.steps[0].messages_seen[1]["content"]
    assert any(st.reward == -0.1 for s in sessions for st in s.steps)  # a random model's replies are not commands
