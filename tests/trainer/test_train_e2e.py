"""End to end on CPU: a real agent through the real gateway and store, verl updates of a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import Trainer

AGENTR1 = str(Path(sys.executable).parent / "agentr1")


def _config(tmp_path: Path, model: Path, steps: int, **extra) -> JobConfig:
    raw = {
        "run_name": "e2e", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "e2e_agent:solve", "timeout_s": 120},
        "data": {"generator": "e2e_agent:make_tasks", "train_size": 8, "val_size": 2, "train_batch_size": 2},
        "reward": {"functions": ["e2e_agent:token_reward"]},
        "algorithm": {"adv_estimator": "grpo", "layout": "merged"},
        "actor_rollout_ref": {"model": str(model), "rollout": {"n": 3, "max_concurrency": 6},
                              "actor": {"optim": {"lr": 1e-3}}},
        "trainer": {"total_training_steps": steps, "default_local_dir": str(tmp_path / "out"), "device": "cpu"},
        **extra,
    }
    return JobConfig.model_validate(raw)


def _run(config: JobConfig) -> dict[str, float]:
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        return trainer.train()
    finally:
        trainer.close()


def _as_written_before_the_policy_rename(checkpoint: Path) -> None:
    """A checkpoint in the layout written before 2026-12-05 (a45b2bb): the policy's state in engine/."""
    (checkpoint / "policy").rename(checkpoint / "engine")
    (checkpoint / "engine" / "policy_state.json").rename(checkpoint / "engine" / "engine_state.json")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("layout", ["policy", "engine"])
def test_two_steps_update_weights_record_versions_and_resume(tmp_path, tiny_model_path, layout):
    final = _run(_config(tmp_path, tiny_model_path, steps=1))
    assert final["policy_version"] == 1.0 and final["actor/optimizer_steps"] >= 1
    if layout == "engine":
        _as_written_before_the_policy_rename(tmp_path / "out" / "checkpoints" / "step_1")
    # resume: the second run continues at step 2 from the step-1 checkpoint
    final = _run(_config(tmp_path, tiny_model_path, steps=2))
    assert final["policy_version"] == 2.0

    out = tmp_path / "out"
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [0, 1, 2]  # evaluation at 0, then each step exactly once
    assert all(h["rollout/failed"] == 0 for h in history[1:])
    assert (out / "curves.png").stat().st_size > 1000

    before = load_file(str(tiny_model_path / "model.safetensors"))
    after = load_file(str(out / "checkpoints" / "step_2" / "hf" / "model.safetensors"))
    assert any(not (before[k] == after[k]).all() for k in before if k in after), "weights did not change"

    with TraceStore.open(tmp_path / "traces.db") as store:
        run_id = json.loads((out / "checkpoints" / "step_2" / "trainer_state.json").read_text())["run_id"]
        sessions = store.list_sessions(run_id, limit=100)
        by_step = {}
        for s in sessions:
            by_step.setdefault(s.metadata["step"], set()).add(s.policy_version)
        assert by_step == {1: {0}, 2: {1}}  # step 2's rollouts were served by the updated policy
        steps = store.get_session(sessions[-1].id).steps
        assert {st.policy_version for st in steps} == {1} and len(steps) == 2
        assert steps[1].observation_ids[: len(steps[0].observation_ids) + len(steps[0].action_ids)] == (
            steps[0].observation_ids + steps[0].action_ids)


@pytest.mark.timeout(900)
def test_the_evaluation_before_training_runs_beside_the_first_rollout(tmp_path, tiny_model_path):
    """Both are sampled from the starting policy, so they share the engine's batches; the evaluation ends
    before the first update (its sessions all at policy version 0) and is logged as step 0, before step 1."""
    config = _config(tmp_path, tiny_model_path, steps=1)
    config.data.val_size = 6
    _run(config)
    out = tmp_path / "out"
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [0, 1] and "success/val" in history[0]
    with TraceStore.open(tmp_path / "traces.db") as store:
        run_id = json.loads((out / "checkpoints" / "step_1" / "trainer_state.json").read_text())["run_id"]
        evaluations = store.list_sessions(f"{run_id}-eval", limit=100)  # before training, and after its step
        rollout = store.list_sessions(run_id, limit=100)
    evaluation = [s for s in evaluations if s.metadata["step"] == 0]
    # the protocol's default (val_kwargs): a greedy pass and one sample a task
    assert len(evaluation) == 12 and len(evaluations) == 24 and len(rollout) == 6
    assert sorted("/greedy/" in s.group_id for s in evaluation) == [False] * 6 + [True] * 6
    assert {s.policy_version for s in evaluation} == {0} and {s.status for s in evaluation} == {"finished"}
    # the two overlapped in time: the first rollout session opened before the last evaluation session ended
    assert min(s.created_at for s in rollout) < max(s.finished_at for s in evaluation)


@pytest.mark.timeout(900)
def test_offline_training_on_sessions_another_process_collected(tmp_path, tiny_model_path):
    collected = tmp_path / "collected"
    _run(_config(collected, tiny_model_path, steps=1))
    with TraceStore.open(collected / "traces.db") as store:
        run_id = next(r.id for r in store.list_runs() if not r.id.endswith("-eval") and r.n_sessions)
    offline = tmp_path / "offline"
    offline.mkdir()
    config = {
        "run_name": "offline", "db": f"sqlite:///{offline / 'trainer.db'}",
        "offline": {"db": f"sqlite:///{collected / 'traces.db'}", "run_id": run_id},
        "data": {"train_batch_size": 2},
        "actor_rollout_ref": {"model": str(tiny_model_path), "actor": {"optim": {"lr": 1e-3}}},
        "trainer": {"total_training_steps": 2, "default_local_dir": str(offline / "out"), "device": "cpu"},
    }
    (offline / "job.yaml").write_text(json.dumps(config))  # JSON is YAML
    proc = subprocess.run([AGENTR1, "train", str(offline / "job.yaml"), "--quiet"], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    history = [json.loads(line) for line in (offline / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["offline/sessions"] > 0 and h["actor/optimizer_steps"] >= 1 for h in history)
    assert any(k.startswith("rollout_corr/") for k in history[0])  # importance correction from recorded logprobs


@pytest.mark.timeout(900)
def test_the_steps_report_what_the_embedded_engine_did(tmp_path, tiny_model_path):
    """engine/* are the engine's counters over each step (its rollout and the evaluations in it): over the
    run, every prompt token of every stored call was either prefilled or served from a cached prefix, and
    every stored action token was sampled. Counters that were not per step would add up to more. memory/* say
    what the process held and which phase raised its peak."""
    _run(_config(tmp_path, tiny_model_path, steps=2))
    history = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    steps = [h for h in history if h["step"] > 0]
    total = {key: sum(h[key] for h in steps) for key in steps[0] if key.startswith("engine/")}
    with TraceStore.open(tmp_path / "traces.db") as store:
        calls = [st for r in store.list_runs() for s in store.list_sessions(r.id, limit=100)
                 for st in store.get_session(s.id).steps]
    prompt_tokens = sum(len(st.observation_ids) for st in calls)
    action_tokens = sum(len(st.action_ids) for st in calls)
    assert total["engine/prefill_tokens"] + total["engine/cached_tokens"] == prompt_tokens
    # a call that ends on an end token samples it; the stored action may leave it out
    assert action_tokens <= total["engine/tokens_generated"] <= action_tokens + len(calls)
    for h in steps:
        assert h["engine/prefill_tokens"] > 0 and h["engine/decode_steps"] > 0
        assert h["engine/forward_passes"] >= h["engine/decode_steps"]
        assert 0 < h["engine/busy_s"] and 0 < h["engine/busy_share"] < 1
    # memory/*: this (pytest's) process, on glibc: its high-water mark, never below the RSS, never falling, and
    # which phase of the step raised it
    for h in steps:
        assert 0 < h["memory/rss_gb"] <= h["memory/peak_gb"] and "memory/freed_kept_gb" not in h
        assert h["memory/peak_rise_rollout_gb"] >= 0 and h["memory/peak_rise_update_gb"] >= 0
    assert steps[0]["memory/peak_gb"] <= steps[1]["memory/peak_gb"]
    # before each update the idle engine gave its KV cache back (the update's new weights forget it anyway)
    assert all(h["memory/kv_cache_released_gb"] > 0 for h in steps)
    assert steps[1]["memory/peak_gb"] >= steps[0]["memory/peak_gb"] + steps[1]["memory/peak_rise_rollout_gb"] \
        + steps[1]["memory/peak_rise_update_gb"] - 1e-6


def test_the_renamed_trainer_engine_key_names_its_new_name(tmp_path, tiny_model_path):
    config = _config(tmp_path, tiny_model_path, steps=1).model_dump()
    config["trainer"]["engine"] = "local"
    with pytest.raises(ValueError, match=r"renamed trainer\.policy"):
        JobConfig.model_validate(config)
