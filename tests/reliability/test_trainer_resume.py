"""A training run interrupted at any point resumes from its last complete checkpoint without training
twice on the same sessions; sessions older than ``rollout.max_staleness`` policy versions are never
trained on. Real trainer (tiny model, verl update on CPU), real gateway, agent and store; the
interruption is an exception raised from a hook at the chosen point (the process state it leaves is
the same as a kill's: nothing after that point happened). This module doubles as the agent."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from agentr1.store import StepRecord, TraceStore
from agentr1.trainer import checkpoints
from agentr1.trainer.checkpoints import TrainerState, latest_checkpoint
from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import Trainer

CUT_AT_CALL: dict[str, int | None] = {"n": None}  # the agent's k-th model call raises Interrupted
CALLS = {"n": 0}


class Interrupted(BaseException):
    """Stands for the process dying: not an Exception, so nothing on the way catches it."""


def solve(task: dict) -> str:
    from agentr1.sdk import openai_client

    CALLS["n"] += 1
    if CALLS["n"] == CUT_AT_CALL["n"]:
        raise Interrupted(f"interrupted during the rollout, at model call {CALLS['n']}")
    reply = openai_client().chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["question"]}], max_tokens=4)
    return reply.choices[0].message.content or ""


def reward(session: Any, task: Any) -> float:
    ids = session.steps[-1].action_ids if session.steps else []
    return sum(i % 2 == 0 for i in ids) / max(1, len(ids))


def _config(tmp_path: Path, model: Path, **extra: Any) -> JobConfig:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "question": f"Say {i}."}) + "\n" for i in range(12)))
    raw = {
        "run_name": "resume", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "test_trainer_resume:solve", "timeout_s": 60},
        "data": {"train_files": [str(tasks)], "train_batch_size": 2, "shuffle": False},
        "reward": {"functions": ["test_trainer_resume:reward"]},
        "actor_rollout_ref": {"model": str(model), "rollout": {"n": 2, "max_concurrency": 4},
                              "actor": {"optim": {"lr": 1e-3}}},
        "trainer": {"total_training_steps": 2, "save_freq": 1, "default_local_dir": str(tmp_path / "out"),
                    "device": "cpu"},
    }
    for section, values in extra.items():
        raw[section] = {**raw.get(section, {}), **values}
    return JobConfig.model_validate(raw)


def _run(config: JobConfig, updates: list[tuple[int, set[str]]], patch: Any = None) -> Trainer:
    """Train; record (step, session ids) of every batch that reaches the policy's update."""
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    real_update = trainer.run.policy.update

    def update(batch: Any, **kw: Any) -> Any:
        updates.append((trainer.run.progress.step + 1, {r.session_id for r in batch.rows}))
        return real_update(batch, **kw)

    trainer.run.policy.update = update
    if patch is not None:
        patch(trainer)
    try:
        trainer.train()
    finally:
        trainer.close()
    return trainer


def _raise_in_update_at_step_2(trainer: Trainer) -> None:
    real = trainer.run.policy.update

    def update(rows: Any, **kw: Any) -> Any:
        if trainer.run.progress.step + 1 == 2:
            raise Interrupted("interrupted after the rollout, before the update")
        return real(rows, **kw)

    trainer.run.policy.update = update


def _raise_in_checkpoint_save_at_step_2(trainer: Trainer) -> None:
    real = trainer.run.policy.save_checkpoint

    def save_checkpoint(path: Path) -> None:
        if trainer.run.progress.step == 2:  # hf/ is written, the policy state is not: a save cut in half
            raise Interrupted("interrupted while saving the checkpoint")
        real(path)

    trainer.run.policy.save_checkpoint = save_checkpoint


def _raise_after_the_step_1_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentr1.trainer import loop

    real = loop.save_checkpoint

    def save_then_die(out_dir: Path, policy: Any, state: TrainerState) -> Path:
        real(out_dir, policy, state)
        raise Interrupted("interrupted right after a checkpoint was saved")

    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", ["rollout", "before_update", "during_save", "after_save"])
def test_an_interrupted_run_resumes_without_training_twice_on_a_session(point, tmp_path, tiny_model_path,
                                                                       monkeypatch):
    config = _config(tmp_path, tiny_model_path)
    updates: list[tuple[int, set[str]]] = []
    patch = {"before_update": _raise_in_update_at_step_2, "during_save": _raise_in_checkpoint_save_at_step_2}.get(point)
    if point == "after_save":
        _raise_after_the_step_1_checkpoint(monkeypatch)
    CALLS["n"], CUT_AT_CALL["n"] = 0, (6 if point == "rollout" else None)  # step 1 makes 4 calls
    with pytest.raises(Interrupted):
        _run(config, updates, patch)
    monkeypatch.undo()
    CUT_AT_CALL["n"] = None
    out = tmp_path / "out"
    resumed_from = latest_checkpoint(out)
    assert resumed_from is not None and resumed_from.name == "step_1"
    first_run = list(updates)
    with TraceStore.open(tmp_path / "traces.db") as store:  # what a SIGKILL mid-rollout leaves: a running session
        left_running = store.create_session(run_id=TrainerState.load(resumed_from).run_id, group_id="killed")
        store.append_steps([StepRecord(session_id=left_running, index=0, observation_ids=[1, 2], action_ids=[3],
                                       action_logprobs=[-1.0], backend="local")])
    resumed_at = dt.datetime.now(dt.UTC)

    trainer = _run(config, updates)  # the same job again: resumes
    assert trainer.run.progress.step == 2 and trainer.run.progress.policy_version == 2
    lineage = [u for u in first_run if u[0] <= 1] + updates[len(first_run):]  # what the final weights learnt
    assert [step for step, _ in lineage] == [1, 2]
    trained = [sid for _, sids in lineage for sid in sids]
    assert len(trained) == len(set(trained)) == 8, "a session was trained on twice (or one is missing)"
    with TraceStore.open(tmp_path / "traces.db") as store:
        run = {s.id: s for s in store.list_sessions(trainer.run.progress.run_id, limit=1000)}
    resumed_sessions = updates[len(first_run):][0][1]
    assert all(run[sid].created_at >= resumed_at for sid in resumed_sessions)  # rolled out after the resume
    assert not any(s.status == "running" for s in run.values())  # interrupted rollouts are marked
    assert run[left_running].status == "abandoned" and left_running not in trained
    assert not list((out / "checkpoints").glob("*.partial"))


def test_a_checkpoint_cut_short_after_its_state_file_is_not_resumed_from(tmp_path):
    done, partial = tmp_path / "checkpoints" / "step_1", tmp_path / "checkpoints" / "step_2.partial"
    for path, step in ((done, 1), (partial, 2)):
        path.mkdir(parents=True)
        (path / checkpoints.STATE_FILE).write_text(json.dumps({"run_id": "r", "step": step}))
    assert latest_checkpoint(tmp_path) == done
    assert TrainerState.load(done).step == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sessions_older_than_max_staleness_are_never_trained_on(tmp_path, tiny_model_path):
    """The trainer believes the policy is at version 3 while the server still samples version 0: the
    sessions of that rollout are 3 versions old; with max_staleness 2 none of them is trained on."""
    config = _config(tmp_path, tiny_model_path, trainer={"total_training_steps": 1, "save_freq": 0})
    config.actor_rollout_ref.rollout.max_staleness = 2
    updates: list[tuple[int, set[str]]] = []
    trainer = _run(config, updates, patch=lambda t: setattr(t.run.progress, "policy_version", 3))
    assert updates == []  # nothing reached the update
    history = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert history[-1]["rollout/stale"] == 4 and history[-1]["rollout/sessions"] == 4
    with TraceStore.open(tmp_path / "traces.db") as store:
        assert {s.policy_version for s in store.list_sessions(trainer.run.progress.run_id)} == {0}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_offline_resume_trains_each_selected_group_once_even_when_the_store_grew(tmp_path, tiny_model_path):
    source = f"sqlite:///{tmp_path / 'collected.db'}"
    with TraceStore.open(source) as store:
        original = [_stored_group(store, f"m{i}") for i in range(6)]
    config = JobConfig.model_validate({
        "run_name": "offline-resume", "db": f"sqlite:///{tmp_path / 'trainer.db'}",
        "offline": {"db": source, "run_id": "collected"},
        "data": {"train_batch_size": 2},
        "actor_rollout_ref": {"model": str(tiny_model_path), "actor": {"optim": {"lr": 1e-3}}},
        "trainer": {"total_training_steps": 3, "save_freq": 1, "default_local_dir": str(tmp_path / "out"),
                    "device": "cpu"},
    })
    updates: list[tuple[int, set[str]]] = []
    with pytest.raises(Interrupted):
        _run(config, updates, _raise_in_update_at_step_2)
    with TraceStore.open(source) as store:  # more sessions arrive; their groups sort first
        late = [_stored_group(store, f"a{i}") for i in range(4)]
    first_run = list(updates)
    _run(config, updates)
    lineage = [u for u in first_run if u[0] <= 1] + updates[len(first_run):]
    assert [step for step, _ in lineage] == [1, 2, 3]
    trained = [sid for _, sids in lineage for sid in sids]
    assert len(trained) == len(set(trained))
    assert set(trained) == {sid for group in original for sid in group}
    assert not set(trained) & {sid for group in late for sid in group}


def _stored_group(store: TraceStore, group: str) -> list[str]:
    """Two finished, rewarded sessions of one task group, one recorded step each."""
    sids = []
    for k in range(2):
        sid = store.create_session(run_id="collected", task_id=group, group_id=group)
        store.append_steps([StepRecord(session_id=sid, index=0, observation_ids=[1, 2, 3, 4], action_ids=[5, 6 + k, 2],
                                       action_logprobs=[-1.0, -2.0, -0.5], backend="local")])
        store.finish_session(sid, reward=float(k))
        sids.append(sid)
    return sids
