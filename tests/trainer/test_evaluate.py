"""`agentr1 eval` (evaluate_checkpoint): a checkpoint served by an embedded gateway, the agent run on
the held-out tasks, scored by the job's reward functions; and the one success/reward metric."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentr1.sdk import GatewayTimeout
from agentr1.sdk.failures import failure_error_text
from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.config import JobConfig, ValidationSampling
from agentr1.trainer.evaluate import evaluate_checkpoint
from agentr1.trainer.rewards import SessionRewards
from agentr1.trainer.scoring import outcome_metrics


def test_outcome_metrics_count_agent_failures_as_zero_and_leave_out_infrastructure_failures():
    # c: the agent itself crashed (the policy's fault); d: the gateway timed out (not the policy's fault)
    agent_crash = failure_error_text(ValueError("the agent could not parse its own output"))
    gateway_timeout = failure_error_text(GatewayTimeout("the gateway did not answer /finish within 5 s"))
    sessions = [SessionRecord("a", status="finished"), SessionRecord("b", status="finished"),
                SessionRecord("c", status="failed", error=agent_crash),
                SessionRecord("d", status="failed", error=gateway_timeout)]
    rewards = {"a": SessionRewards("a", {}, 1.0), "b": SessionRewards("b", {}, -0.5),
               "c": SessionRewards("c", {}, 5.0), "d": SessionRewards("d", {}, 0.0)}
    assert outcome_metrics(sessions, rewards, success_key="s", reward_key="r") == \
        {"s": 1 / 3, "r": 0.5 / 3, "s/infra_failed": 1.0}
    assert outcome_metrics([], {}, success_key="s", reward_key="r") == {"s": 0.0, "r": 0.0, "s/infra_failed": 0.0}


def eval_job(tmp_path: Path, model: Path, entrypoint: str, *, val_size: int, max_concurrency: int) -> JobConfig:
    """A job of ``entrypoint`` on e2e_agent's tasks and reward, served by the tiny model on the CPU."""
    return JobConfig.model_validate({
        "run_name": "ev", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": entrypoint, "timeout_s": 120},
        "data": {"generator": "e2e_agent:make_tasks", "train_size": 4, "val_size": val_size},
        "reward": {"functions": ["e2e_agent:token_reward"]},
        "actor_rollout_ref": {"model": str(model), "rollout": {"max_concurrency": max_concurrency}},
        "trainer": {"device": "cpu"},
    })


@pytest.mark.timeout(600)
def test_evaluate_checkpoint_serves_scores_and_records_every_sample(tmp_path: Path, tiny_model_path: Path):
    job = eval_job(tmp_path, tiny_model_path, "e2e_agent:solve", val_size=2, max_concurrency=4)
    result = asyncio.run(evaluate_checkpoint(job, None, split="val", protocol=ValidationSampling(greedy=False, n=2),
                                             run_id="ev-run"))
    assert (result["run_id"], result["tasks"], result["samples"], result["failed"]) == ("ev-run", 2, 4, 0)
    with TraceStore.open(job.db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions("ev-run")]
    assert len(sessions) == 4 and all(s.status == "finished" and len(s.steps) == 2 for s in sessions)
    assert all(s.steps[-1].model == "policy" for s in sessions)  # served by the embedded gateway's backend
    outcomes = [s.reward for s in sessions]  # the reward function's result, stored per session
    assert all(o is not None for o in outcomes)
    assert result["reward"] == pytest.approx(sum(outcomes) / 4)
    assert result["success"] == pytest.approx(sum(o > 0 for o in outcomes) / 4)


@pytest.mark.timeout(600)
def test_evaluate_runs_max_concurrency_sync_sessions_at_once(tmp_path: Path, tiny_model_path: Path, monkeypatch):
    """24 sessions of a sync agent, max_concurrency 24: all of them run at the same time (asyncio's default
    executor, min(32, cpus + 4) threads, held the sessions beyond it back until others ended)."""
    (tmp_path / "met").mkdir()
    monkeypatch.setenv("AGENTR1_TEST_PIDS", str(tmp_path / "met"))
    monkeypatch.setenv("AGENTR1_TEST_MEET", "24")
    job = eval_job(tmp_path, tiny_model_path, "e2e_agent:solve_meeting_the_others", val_size=12, max_concurrency=24)
    result = asyncio.run(evaluate_checkpoint(job, None, split="val", protocol=ValidationSampling(greedy=False, n=2),
                                             run_id="ev-run"))
    assert (result["samples"], result["failed"]) == (24, 0)
    with TraceStore.open(job.db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions("ev-run")]
    assert len(sessions) == 24 and all(len(s.steps) == 2 for s in sessions)  # none waited in vain
