"""Asynchronous training (trainer.mode: async): staleness bound, behaviour versions, IS correction,
rollouts during updates, resume. The end-to-end test runs a real agent through the real gateway
and store, verl updates of the tiny model; this module doubles as the agent (``test_async_loop:solve``)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from agentr1.store import SessionRecord, StepRecord, TraceStore
from agentr1.trainer.async_loop import FinishedGroup, behaviour_version, split_by_staleness
from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import Trainer, policy_config
from agentr1.trainer.rollout import RolloutReport

# -- the agent and tasks of the end-to-end test ----------------------------------------------------


def make_tasks(split: str, n: int, seed: int) -> list[dict]:
    """Every fourth task's tool is slow: its group straddles several updates and goes stale."""
    return [{"id": f"{split}-{i}", "question": f"Tell me about {i}.", "tool_s": 6.0 if i % 4 == 3 else 0.1}
            for i in range(n)]


def solve(task: dict) -> str:
    from agentr1.sdk import openai_client

    client = openai_client()
    messages = [{"role": "user", "content": task["question"]}]
    reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=6, temperature=1.0)
    time.sleep(task["tool_s"])  # the tool / environment
    messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "ok"}]
    final = client.chat.completions.create(model="policy", messages=messages, max_tokens=6, temperature=1.0)
    return final.choices[0].message.content or ""


def reward(session, task) -> float:
    ids = session.steps[-1].action_ids if session.steps else []
    return sum(i % 2 == 0 for i in ids) / max(1, len(ids))


# -- unit ------------------------------------------------------------------------------------------


def _session(sid: str, session_version: int, step_versions: list[int]) -> SessionRecord:
    steps = [StepRecord(session_id=sid, index=i, observation_ids=[1], action_ids=[2], policy_version=v)
             for i, v in enumerate(step_versions)]
    return SessionRecord(id=sid, status="finished", policy_version=session_version, steps=steps)


def test_behaviour_version_is_the_oldest_step_of_the_group():
    spanning = _session("a", 3, [3, 4, 5])  # its calls spanned two weight syncs
    assert behaviour_version([spanning, _session("b", 4, [4])]) == 3
    assert behaviour_version([_session("c", 2, [])]) == 2  # no steps: the session's version


def test_split_by_staleness_drops_groups_older_than_the_bound():
    groups = [FinishedGroup(f"g{v}", "t", [], {}, RolloutReport(), v) for v in (2, 3, 4, 5)]
    fresh, stale = split_by_staleness(groups, current_version=5, max_staleness=2)
    assert [g.behaviour_version for g in fresh] == [3, 4, 5]
    assert [g.behaviour_version for g in stale] == [2]


def test_async_config_errors_are_clear():
    base = {"agent": {"entrypoint": "m:f"}, "trainer": {"mode": "async"}}
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        JobConfig.model_validate(base)
    with pytest.raises(ValueError, match=r"trainer\.mode"):
        JobConfig.model_validate({**base, "trainer": {"mode": "later"}})
    ok = JobConfig.model_validate({**base, "actor_rollout_ref": {"rollout": {"max_staleness": 1}}})
    assert policy_config(ok).rollout_is == "token"  # importance weights from the rollout log-probs
    assert policy_config(JobConfig.model_validate({"agent": {"entrypoint": "m:f"}})).rollout_is is None
    # bypass_mode: the rollout log-probs are the PPO ratio's anchor, no separate importance weights
    bypass = {**base, "actor_rollout_ref": {"rollout": {"max_staleness": 1}},
              "algorithm": {"rollout_correction": {"bypass_mode": True}}}
    settings = policy_config(JobConfig.model_validate(bypass))
    assert settings.bypass_mode and settings.rollout_is is None
    settings.validate()


# -- end to end ------------------------------------------------------------------------------------


def _config(tmp_path: Path, model: Path, steps: int) -> JobConfig:
    return JobConfig.model_validate({
        "run_name": "async", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "test_async_loop:solve", "timeout_s": 60},
        "data": {"generator": "test_async_loop:make_tasks", "train_size": 64, "val_size": 1, "train_batch_size": 2,
                 "shuffle": False},
        "reward": {"functions": ["test_async_loop:reward"]},
        "actor_rollout_ref": {"model": str(model), "rollout": {"n": 2, "max_concurrency": 8, "max_staleness": 1},
                              "actor": {"optim": {"lr": 1e-3}}},
        "trainer": {"total_training_steps": steps, "default_local_dir": str(tmp_path / "out"), "device": "cpu",
                    "mode": "async"},
    })


def _train_with_update_spy(config: JobConfig, seen: list[tuple[int, list[str]]]) -> dict[str, float]:
    """Run the trainer; record (policy version, session ids) of every batch reaching policy.update."""
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    real_update = trainer.run.policy.update

    def update(batch, **kw):
        seen.append((trainer.run.progress.policy_version, sorted({r.session_id for r in batch.rows})))
        return real_update(batch, **kw)

    trainer.run.policy.update = update
    try:
        return trainer.train()
    finally:
        trainer.close()


def _utc(moment: dt.datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_async_training_bounds_staleness_overlaps_updates_and_resumes(tmp_path, tiny_model_path):
    seen: list[tuple[int, list[str]]] = []
    first = _train_with_update_spy(_config(tmp_path, tiny_model_path, steps=3), seen)
    assert first["policy_version"] == 3.0
    final = _train_with_update_spy(_config(tmp_path, tiny_model_path, steps=5), seen)  # resumes at step 4
    assert final["policy_version"] == 5.0 and len(seen) == 5

    out = tmp_path / "out"
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [0, 1, 2, 3, 4, 5]  # evaluation at 0, then each update once
    assert all(any(k.startswith("rollout_corr/") for k in h) for h in history[1:])  # IS weights from rollout log-probs
    audit = [json.loads(line) for line in (out / "async_groups.jsonl").read_text().splitlines()]
    trained = [g["group_id"] for a in audit for g in a["trained"]]
    assert len(trained) == len(set(trained)) == 10  # 2 groups per update, none trained twice (across the resume)
    assert sum(len(a["dropped"]) for a in audit) >= 1  # the slow tool's groups went stale

    with TraceStore.open(tmp_path / "traces.db") as store:
        step_versions = {sid: [st.policy_version for st in store.get_session(sid).steps]
                         for _, sids in seen for sid in sids}
        # the bound: no session whose oldest step is more than max_staleness versions old was trained on
        for version, sids in seen:
            assert all(version - min(step_versions[sid]) <= 1 for sid in sids), (version, sids)
        # behaviour versions recorded per step: some trained sessions were sampled by an older policy
        assert any(min(step_versions[sid]) < version for version, sids in seen for sid in sids)
        # the producer kept running during updates: model calls recorded inside an update's window
        run_id = json.loads((out / "checkpoints" / "step_5" / "trainer_state.json").read_text())["run_id"]
        calls = [_utc(st.created_at) for s in store.list_sessions(run_id, limit=1000)
                 for st in store.get_session(s.id).steps if st.created_at is not None]
        during = sum(a["update_start"] <= c <= a["update_end"] for a in audit for c in calls)
        assert during >= 1, "no model call happened while the policy was updating"
