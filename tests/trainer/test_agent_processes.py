"""``agent.processes``: the agent's sessions run in spawned worker processes (off the GIL of the
trainer's embedded gateway), through the same real gateway and store as in-process agents."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentr1.sdk.failures import failure_kind_of_error
from agentr1.store import TraceStore
from agentr1.trainer.config import AgentConfig, JobConfig, ValidationSampling
from agentr1.trainer.evaluate import evaluate_checkpoint
from agentr1.trainer.rollout import AgentRunner, collect


def _pids(folder: Path) -> list[tuple[str, int]]:
    """Where each session ran: the files ``solve_noting_the_process`` left, as (task id, pid)."""
    return [(name, int(pid)) for name, _, pid in (p.name.rpartition(".") for p in folder.iterdir()) if pid.isdigit()]


@pytest.mark.timeout(600)
def test_an_evaluation_runs_its_sessions_in_two_worker_processes(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.setenv("AGENTR1_TEST_PIDS", str(tmp_path))
    job = JobConfig.model_validate({
        "run_name": "ev", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "e2e_agent:solve_noting_the_process", "timeout_s": 120, "processes": 2},
        "data": {"generator": "e2e_agent:make_tasks", "train_size": 4, "val_size": 4},
        "reward": {"functions": ["e2e_agent:token_reward"]},
        "actor_rollout_ref": {"model": str(tiny_model_path), "rollout": {"max_concurrency": 8}},
        "trainer": {"device": "cpu"},
    })
    result = asyncio.run(evaluate_checkpoint(job, None, split="val", protocol=ValidationSampling(greedy=False, n=2),
                                             run_id="ev-run"))
    assert (result["tasks"], result["samples"], result["failed"]) == (4, 8, 0)
    with TraceStore.open(job.db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions("ev-run")]
    assert len(sessions) == 8 and all(s.status == "finished" and len(s.steps) == 2 for s in sessions)
    assert all(s.reward is not None for s in sessions)
    pids = {pid for name, pid in _pids(tmp_path) if name.startswith("val-")}
    assert len(pids) == 2 and os.getpid() not in pids  # both workers took sessions; none ran here


@pytest.mark.timeout(300)
def test_a_worker_that_dies_fails_its_session_and_is_replaced(tmp_path, scripted_gateway, monkeypatch):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    monkeypatch.setenv("AGENTR1_TEST_PIDS", str(pid_dir))
    runner = AgentRunner(AgentConfig(entrypoint="e2e_agent:solve_noting_the_process", timeout_s=60, processes=2))
    assert runner.workers is not None
    runner.workers.wait_ready()  # spawned when the runner is made, before the SDK knows the gateway below
    tasks = [{"id": "t-exit", "question": "?"}] + [{"id": f"t{i}", "question": "?"} for i in range(3)]
    try:
        with scripted_gateway(tmp_path / "traces.db", lambda prompt: "ok") as (_url, store):
            first = asyncio.run(collect(runner, tasks[:1], n=1, run_id="r", step=1, max_concurrency=4))
            second = asyncio.run(collect(runner, tasks[1:], n=2, run_id="r", step=2, max_concurrency=4))
            stored = [store.get_session(s) for s in second.sessions]
            died = [store.get_session(s.id) for s in store.list_sessions("r") if s.task_id == "t-exit"]
    finally:
        runner.close()
    assert (first.finished, first.failed) == (0, 1)
    assert "agent worker process" in first.errors[0] and "exited (code 3)" in first.errors[0]
    # the session the worker had opened is in the store, failed, and the report names it
    assert len(died) == 1 and first.sessions == [died[0].id] and died[0].status == "failed"
    assert "exited (code 3)" in (died[0].error or "") and failure_kind_of_error(died[0].error) == "agent"
    assert (second.finished, second.failed, len(second.sessions)) == (6, 0, 6)
    assert all(s.status == "finished" and len(s.steps) == 2 for s in stored)
    assert len({pid for _, pid in _pids(pid_dir)}) == 2 and "t-exit" not in {name for name, _ in _pids(pid_dir)}


def test_agent_processes_are_for_entrypoint_agents():
    with pytest.raises(ValueError, match=r"agent\.processes applies to `entrypoint` agents"):
        AgentConfig(command=["python", "agent.py"], processes=2)
    with pytest.raises(ValueError):
        AgentConfig(entrypoint="e2e_agent:solve", processes=0)


@pytest.mark.timeout(300)
def test_a_worker_runs_all_its_sync_sessions_at_once(tmp_path, scripted_gateway, monkeypatch):
    """24 sessions of a sync agent in 2 workers are all running at the same time: a worker's threads are not
    capped by asyncio's default executor (min(32, cpus + 4) threads, 6 on a 2-core machine), which made the
    later sessions of a rollout wait for the first ones to end."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    monkeypatch.setenv("AGENTR1_TEST_PIDS", str(pid_dir))
    monkeypatch.setenv("AGENTR1_TEST_MEET", "24")
    runner = AgentRunner(AgentConfig(entrypoint="e2e_agent:solve_meeting_the_others", timeout_s=120, processes=2))
    assert runner.workers is not None
    runner.workers.wait_ready()
    tasks = [{"id": f"t{i}", "question": "?"} for i in range(12)]
    try:
        with scripted_gateway(tmp_path / "traces.db", lambda prompt: "ok") as (_url, store):
            report = asyncio.run(collect(runner, tasks, n=2, run_id="r", step=1, max_concurrency=24))
            stored = [store.get_session(s) for s in report.sessions]
    finally:
        runner.close()
    assert (report.finished, report.failed) == (24, 0)
    assert all(len(s.steps) == 2 for s in stored)  # every session met the others and called the model
    assert len({pid for _, pid in _pids(pid_dir)}) == 2


@pytest.mark.timeout(300)
@pytest.mark.parametrize("processes", [1, 2])
def test_sessions_run_with_the_heap_frozen_and_the_trainer_unfreezes_it_after(tmp_path, scripted_gateway, processes):
    """A full garbage collection of the trainer's heap would stall its gateway mid-rollout (0.3 s measured): a
    rollout runs with the heap frozen, in the trainer's process (until it ends) and in agent workers (for good)."""
    import gc

    runner = AgentRunner(AgentConfig(entrypoint="e2e_agent:solve_reporting_the_heap", timeout_s=60,
                                     processes=processes))
    if runner.workers is not None:
        runner.workers.wait_ready()
    tasks = [{"id": f"t{i}", "question": "?"} for i in range(3)]
    try:
        with scripted_gateway(tmp_path / "traces.db", lambda prompt: "ok") as (_url, store):
            assert gc.get_freeze_count() == 0
            report = asyncio.run(collect(runner, tasks, n=2, run_id="r", step=1, max_concurrency=6))
            stored = [store.get_session(s) for s in report.sessions]
            after = gc.get_freeze_count()
    finally:
        runner.close()
    assert (report.finished, report.failed) == (6, 0)
    assert [s.reward for s in stored] == [1.0] * 6  # every session saw a frozen heap where it ran
    assert after == 0  # and the trainer's own heap is collected as usual again


@pytest.mark.timeout(300)
def test_a_rollout_runs_with_the_switch_interval_it_was_given_and_restores_it(tmp_path, scripted_gateway):
    """collect(switch_interval_s=...): the trainer's process hands the GIL over sooner while the rollout runs (the
    gateway's loop waits less for it after each I/O), and has Python's interval back after."""
    import sys

    runner = AgentRunner(AgentConfig(entrypoint="e2e_agent:solve_reporting_the_switch_interval", timeout_s=60))
    before = sys.getswitchinterval()
    try:
        with scripted_gateway(tmp_path / "traces.db", lambda prompt: "ok") as (_url, store):
            report = asyncio.run(collect(runner, [{"id": "t", "question": "?"}], n=2, run_id="r", step=1,
                                         max_concurrency=2, switch_interval_s=0.0005))
            rewards = [store.get_session(s).reward for s in report.sessions]
            plain = asyncio.run(collect(runner, [{"id": "u", "question": "?"}], n=1, run_id="r", step=2,
                                        max_concurrency=2))
            rewards_plain = [store.get_session(s).reward for s in plain.sessions]
    finally:
        runner.close()
    assert rewards == [pytest.approx(0.5)] * 2 and rewards_plain == [pytest.approx(before * 1000)]
    assert sys.getswitchinterval() == before
