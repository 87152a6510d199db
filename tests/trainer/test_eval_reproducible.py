"""A greedy evaluation gives the same episodes every time it runs on the same machine: the laptop demo's job
(examples/chains/demo.yaml, bfloat16 where the CPU multiplies it, the job's own engine.exact false) on a few test
chains with the real SmolLM2, once with one episode at a time on one engine thread, once with every episode at once
on two, gives the same outcome for every task and the same action ids and log-probabilities, bit for bit, at every
stored step (docs/evaluation.md, reproducibility). The untrained model answers the chains without calling the
calculator, so every other chain has its calls forced (``e2e_agent.chains_with_forced_calls``): episodes of three
calls, each prompt extending the one before with the call and the tool's result."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig, ValidationSampling
from agentr1.trainer.cpu_dtypes import cpu_has_bfloat16_matmuls, fit_dtypes_to_cpu
from agentr1.trainer.evaluate import evaluate_checkpoint

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parents[2] / "examples" / "chains" / "demo.yaml"
TASKS = 6


def _greedy_eval(tmp_path: Path, model: Path, run_id: str, *, concurrency: int) -> tuple[dict[str, Any], dict]:
    """The demo job's greedy pass on its first test chains: the answer, and each task's steps as stored."""
    job = fit_dtypes_to_cpu(JobConfig.from_yaml(str(DEMO), [
        f"db=sqlite:///{tmp_path / 'traces.db'}", f"actor_rollout_ref.model={model}", f"data.test_size={TASKS}",
        "data.generator=e2e_agent:chains_with_forced_calls", f"actor_rollout_ref.rollout.max_concurrency={concurrency}",
        f"trainer.default_local_dir={tmp_path / 'out'}"]))
    answer = asyncio.run(evaluate_checkpoint(job, None, protocol=ValidationSampling(greedy=True, n=0), run_id=run_id))
    with TraceStore.open(job.db) as store:
        sessions = store.get_sessions([s.id for s in store.list_sessions(run_id)])
    steps = {s.task_id: [(list(st.action_ids), list(st.action_logprobs)) for st in s.steps] for s in sessions}
    return answer, steps


@pytest.mark.timeout(900)
def test_the_greedy_pass_gives_the_same_episodes_at_any_concurrency_and_thread_count(tmp_path: Path,
                                                                                     smollm2_path: Path,
                                                                                     monkeypatch) -> None:
    monkeypatch.setenv("AGENTR1_ENGINE__THREADS", "1")  # GatewaySettings.engine.threads
    one, one_steps = _greedy_eval(tmp_path, smollm2_path, "one-at-a-time", concurrency=1)
    monkeypatch.setenv("AGENTR1_ENGINE__THREADS", "2")
    crowd, crowd_steps = _greedy_eval(tmp_path, smollm2_path, "all-at-once", concurrency=TASKS)
    assert one["reproducible"] and one["tasks"] == TASKS
    assert one["dtype"] == ("bfloat16" if cpu_has_bfloat16_matmuls() else "float32")  # the dtype served
    assert sorted(len(steps) for steps in one_steps.values()) == [1, 1, 1, 3, 3, 3]
    assert crowd["tasks_detail"] == one["tasks_detail"]  # every task's greedy outcome
    assert crowd_steps == one_steps  # every step's action ids and log-probabilities, bit for bit
