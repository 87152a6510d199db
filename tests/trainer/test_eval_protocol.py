"""`agentr1 eval` under the evaluation protocol: a greedy pass that is deterministic whatever the agent asks, K
samples a task that differ (seeded agents too), the metrics, and --compare; a tiny random model on the CPU
behind a real embedded gateway, the real OpenAI client inside the agent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_evaluate import eval_job
from typer.testing import CliRunner

from agentr1.cli.main import app
from agentr1.store import TraceStore
from agentr1.trainer.config import ValidationSampling
from agentr1.trainer.evaluate import evaluate_checkpoint


def _actions(db: str, run_id: str, group_part: str) -> dict[str, list[tuple[int, ...]]]:
    """Each task's sessions' first actions (sample order) among the run's groups containing ``group_part``."""
    with TraceStore.open(db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions(run_id, limit=1000)]
    out: dict[str, list[tuple[int, ...]]] = {}
    for s in sorted(sessions, key=lambda s: s.metadata["sample"]):
        if group_part in (s.group_id or ""):
            out.setdefault(s.task_id, []).append(tuple(s.steps[0].action_ids))
    return out


@pytest.mark.timeout(600)
def test_greedy_is_deterministic_and_samples_differ_for_a_seeded_agent(tmp_path: Path, tiny_model_path: Path):
    job = eval_job(tmp_path, tiny_model_path, "e2e_agent:solve_seeded", val_size=3, max_concurrency=8)
    protocol = ValidationSampling(greedy=True, n=3, temperature=1.0)
    first = asyncio.run(evaluate_checkpoint(job, None, protocol=protocol, run_id="p1"))
    asyncio.run(evaluate_checkpoint(job, None, protocol=protocol, run_id="p2"))
    greedy1, greedy2 = _actions(job.db, "p1", "/greedy/"), _actions(job.db, "p2", "/greedy/")
    assert len(greedy1) == 3 and greedy1 == greedy2  # temperature 0 on every call, though the agent asks for 1
    sampled1, sampled2 = _actions(job.db, "p1", "/sampled/"), _actions(job.db, "p2", "/sampled/")
    assert all(len(set(runs)) == 3 for runs in sampled1.values())  # the agent's one seed, three different samples
    assert sampled1 == sampled2  # each sample reproducible (seed + its own offset)
    with TraceStore.open(job.db) as store:
        temps = {st.sampling["temperature"] for s in store.list_sessions("p1", limit=100)
                 for st in store.get_session(s.id).steps if "/greedy/" in (s.group_id or "")}
    assert temps == {0.0}
    base = "val-core/ev/acc"
    for key in (f"{base}/greedy@1", f"{base}/mean@3", f"{base}/pass@3"):
        assert key in first and f"{key}/ci_low" in first
    assert f"{base}/maj@3/mean" not in first  # these tasks carry no answer
    detail = first["tasks_detail"]
    assert first[f"{base}/greedy@1"] == pytest.approx(sum(t["greedy"] for t in detail) / 3)
    assert first[f"{base}/pass@3"] == pytest.approx(sum(any(t["samples"]) for t in detail) / 3)
    assert (first["samples"], first["failed"], first["greedy_failed"]) == (9, 0, 0)


@pytest.mark.timeout(600)
def test_cli_compare_prints_paired_tests_on_the_same_tasks(tmp_path: Path, tiny_model_path: Path):
    job = eval_job(tmp_path, tiny_model_path, "e2e_agent:solve", val_size=4, max_concurrency=8)
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(job.model_dump(mode="json", exclude_none=True)))
    out = tmp_path / "cmp.json"
    result = CliRunner().invoke(app, ["eval", str(config), "--compare", str(tiny_model_path), str(tiny_model_path),
                                      "--n", "2", "--temperature", "1.0", "--output", str(out), "--run-id", "cmp"])
    assert result.exit_code == 0, result.output
    assert "mcnemar" in result.output and "paired bootstrap" in result.output
    answer = json.loads(out.read_text())
    assert [t["metric"] for t in answer["paired"]] == ["greedy@1", "mean@2", "pass@2"]
    greedy = answer["paired"][0]
    assert greedy["diff"] == 0.0 and greedy["p_value"] == 1.0  # one model, greedily: the same answers
    assert len(answer["a"]["tasks_detail"]) == len(answer["b"]["tasks_detail"]) == 4
    assert "tasks_detail" not in json.loads(result.stdout.strip().splitlines()[-1])["a"]


def test_cli_refuses_an_evaluation_of_nothing(tmp_path: Path, tiny_model_path: Path):
    job = eval_job(tmp_path, tiny_model_path, "e2e_agent:solve", val_size=1, max_concurrency=1)
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(job.model_dump(mode="json", exclude_none=True)))
    result = CliRunner().invoke(app, ["eval", str(config), "--n", "0", "--no-greedy"])
    assert result.exit_code == 2 and "nothing to evaluate" in result.output
