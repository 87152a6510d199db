"""``actor_rollout_ref.rollout.gateway_processes``: the rollout's sessions are served by gateway processes that
share the engine process, through the trainer's own serving and rollout code (``start_serving``, ``collect``):
every shard takes sessions, every call is a stored step, weights loaded by the trainer reach the shards' steps and
sessions with their policy version, and closing stops the processes."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from agentr1.store import TraceStore
from agentr1.trainer import serving
from agentr1.trainer.config import JobConfig
from agentr1.trainer.rollout import AgentRunner, collect
from agentr1.trainer.serving import start_serving


def calls_served(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return int(re.search(r"^agentr1_calls_total (\d+)", text, re.M).group(1))


@pytest.mark.slow  # an engine process and two gateway processes, each importing torch
@pytest.mark.timeout(600)
def test_a_rollout_is_served_by_two_gateway_processes_sharing_the_engine(tmp_path, tiny_model_path):
    job = JobConfig.model_validate({
        "run_name": "shards", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "e2e_agent:solve", "timeout_s": 120},
        "data": {"generator": "e2e_agent:make_tasks", "train_size": 4, "val_size": 4},
        "reward": {"functions": ["e2e_agent:token_reward"]},
        "actor_rollout_ref": {"model": str(tiny_model_path),
                              "rollout": {"max_concurrency": 8, "gateway_processes": 2}},
        "trainer": {"device": "cpu"},
    })
    tasks = [{"id": f"t{i}", "question": f"what is {i} + 1?"} for i in range(4)]
    with TraceStore.open(job.db) as store:
        store.ensure_run("shards-run", "shards")
        serving = start_serving(job, store, tiny_model_path, tiny_model_path, run_id="shards-run", policy_version=0,
                                log_dir=tmp_path / "logs")
        processes = list(serving.shards.processes)
        runner = AgentRunner(job.agent, gateways=serving.rollout_urls)
        try:
            assert len(serving.rollout_urls) == 2 and serving.url not in serving.rollout_urls
            first = asyncio.run(collect(runner, tasks, n=2, run_id="shards-run", step=1, max_concurrency=8))
            served = [calls_served(url) for url in serving.rollout_urls]
            assert calls_served(serving.url) == 0  # the trainer's own gateway served none of them
            counters = serving.engine_counters()  # the engine process's, the shards' rows included

            from transformers import AutoModelForCausalLM

            from agentr1.core.models import build_tiny_random_model

            other = AutoModelForCausalLM.from_pretrained(build_tiny_random_model(tmp_path / "other", seed=5))
            version = asyncio.run(serving.backend.update_weights_from_tensors(
                {k: v.clone() for k, v in other.state_dict().items()}))
            second = asyncio.run(collect(runner, tasks, n=2, run_id="shards-run", step=2, max_concurrency=8))
            stored = {s: store.get_session(s) for s in first.sessions + second.sessions}
        finally:
            runner.close()
            serving.close()
    assert (first.finished, first.failed, second.finished, second.failed) == (8, 0, 8, 0)
    assert all(n >= 2 for n in served) and sum(served) == sum(len(stored[s].steps) for s in first.sessions)
    assert counters["tokens_generated"] > 0
    assert version == 1
    for sessions, expected in ((first.sessions, 0), (second.sessions, 1)):
        for sid in sessions:
            record = stored[sid]
            assert record.status == "finished" and record.steps and record.policy_version == expected
            assert {step.policy_version for step in record.steps} == {expected}
    assert not any(p.is_alive() for p in processes)  # closing stopped them


def test_gateway_processes_are_an_option_of_the_embedded_engine():
    with pytest.raises(ValueError, match="gateway_processes is an option of the embedded engine"):
        JobConfig.model_validate({"actor_rollout_ref": {"model": "m", "rollout": {
            "name": "sglang", "urls": ["http://127.0.0.1:1"], "gateway_processes": 2}}})
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        JobConfig.model_validate({"actor_rollout_ref": {"model": "m", "rollout": {"gateway_processes": 0}}})


@pytest.mark.parametrize(("cores", "engine_process", "expected"),
                         [(16, True, 4), (64, True, 4), (8, True, 2), (2, True, 1), (None, True, 1), (64, False, 1)])
def test_unset_gateway_processes_follow_the_engine_process_and_the_cores(monkeypatch, cores, engine_process, expected):
    monkeypatch.setattr(serving.os, "cpu_count", lambda: cores)
    assert serving.default_gateway_processes(engine_process) == expected
