"""The GSM8K recipe trains end to end on CPU: Agent-R1 parquet rows through
``agentr1.envs:run_task``, the real gateway and store, verl updates of a tiny model."""

from __future__ import annotations

import json

import pytest
from examples.gsm8k.prepare import prepare

from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import Trainer

STEPS = 2


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_few_training_steps_of_the_gsm8k_recipe(tmp_path, tiny_model_path):
    files = prepare(tmp_path / "data", limit=8, sampling={"temperature": 1.0, "max_tokens": 24})
    config = JobConfig.from_yaml("examples/gsm8k/train.yaml", [
        f"db=sqlite:///{tmp_path / 'traces.db'}", f"data.train_files=[{files['train']}]", "data.val_files=[]",
        f"actor_rollout_ref.model={tiny_model_path}", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.optim.lr=1e-3", f"trainer.total_training_steps={STEPS}",
        f"trainer.default_local_dir={tmp_path / 'out'}", "trainer.device=cpu"])
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        final = trainer.train()
    finally:
        trainer.close()

    assert final["policy_version"] == float(STEPS)
    history = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history][-STEPS:] == list(range(1, STEPS + 1))
    assert all(h["rollout/failed"] == 0 for h in history if "rollout/failed" in h)
    with TraceStore.open(tmp_path / "traces.db") as store:
        run_id = json.loads((tmp_path / "out" / "checkpoints" / f"step_{STEPS}" / "trainer_state.json")
                            .read_text())["run_id"]
        sessions = [store.get_session(s.id) for s in store.list_sessions(run_id, limit=100)]
    assert len(sessions) == STEPS * config.data.train_batch_size * 2
    for s in sessions:
        assert s.status == "finished" and s.steps
        assert s.reward in (0.0, 1.0)  # run_task's exact-match score, recorded as the outcome
        assert [r.step_index for r in s.rewards if r.source == "environment"] == [st.index for st in s.steps]
