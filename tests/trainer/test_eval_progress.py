"""`agentr1 eval`'s progress (episodes done, success so far, elapsed, time left, on stderr as episodes end) and its
split (test by default, val on request): the display alone, then a tiny random model behind a real embedded gateway,
scored as its episodes end and scored at the end giving the same outcomes."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from test_evaluate import eval_job
from typer.testing import CliRunner

from agentr1.cli.main import app
from agentr1.trainer.config import ValidationSampling
from agentr1.trainer.eval_progress import EvalProgress
from agentr1.trainer.evaluate import evaluate_checkpoint


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_plain_display_prints_a_line_at_each_tenth_with_success_so_far_and_time_left():
    out, clock = io.StringIO(), FakeClock()
    progress = EvalProgress(20, title="eval test", console=Console(file=out, width=200), clock=clock)
    progress.begin("greedy")
    for k in range(4):  # 4 of 20 episodes in 40 s: two tenths, 2:40 left at this pace
        clock.now += 10
        progress.episode_ended()
        progress.scored(successes=k % 2, judged=1)
    assert out.getvalue().splitlines() == [
        "eval test greedy: 2/20 episodes, success 0/1 (0%), 0:00:20 elapsed, 0:03:00 left",
        "eval test greedy: 4/20 episodes, success 1/3 (33%), 0:00:40 elapsed, 0:02:40 left"]
    assert progress.line() == "eval test greedy: 4/20 episodes, success 2/4 (50%), 0:00:40 elapsed, 0:02:40 left"
    progress.close()  # the tally scored after the last line ends the display
    assert out.getvalue().splitlines()[-1] == progress.line()
    quiet = io.StringIO()
    silent = EvalProgress(4, title="eval", console=Console(file=quiet, quiet=True))
    silent.episode_ended()
    silent.close()
    assert quiet.getvalue() == ""


@pytest.mark.timeout(600)
def test_scoring_as_episodes_end_gives_the_outcomes_of_scoring_at_the_end(tmp_path: Path, tiny_model_path: Path,
                                                                           capsys):
    job = eval_job(tmp_path, tiny_model_path, "e2e_agent:solve_seeded", val_size=4, max_concurrency=4)
    protocol = ValidationSampling(greedy=True, n=1, temperature=1.0)
    live = asyncio.run(evaluate_checkpoint(job, None, protocol=protocol, run_id="live", progress_title="eval test"))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("eval test")]
    at_end = asyncio.run(evaluate_checkpoint(job, None, protocol=protocol, run_id="end"))
    assert job.actor_rollout_ref.rollout.engine.dtype == "auto"
    assert live["split"] == "test" and live["dtype"] == "float32"  # the dtype served: auto on the CPU
    for key in ("tasks_detail", "success", "reward", "success_greedy", "reward_greedy"):
        assert live[key] == at_end[key], key  # greedy and seeded samples: the same runs, scored either way
    assert lines[0].startswith("eval test greedy: 1/8 episodes") and " left" in lines[0]
    successes = round(live["success_greedy"] * 4 + live["success"] * 4)
    assert lines[-1].startswith(f"eval test sampled (K=1): 8/8 episodes, success {successes}/8")


@pytest.mark.timeout(600)
def test_cli_evaluates_the_test_split_by_default_and_val_on_request(tmp_path: Path, tiny_model_path: Path):
    job = eval_job(tmp_path, tiny_model_path, "e2e_agent:solve", val_size=2, max_concurrency=4)
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(job.model_dump(mode="json", exclude_none=True)))
    runs = {}
    for split_args in ([], ["--split", "val"]):
        out = tmp_path / f"answer{len(runs)}.json"
        result = CliRunner().invoke(app, ["eval", str(config), "data.test_size=3", "--n", "0", *split_args,
                                          "--output", str(out)])
        assert result.exit_code == 0, result.output
        runs[tuple(split_args)] = (json.loads(out.read_text()), result.stderr)
    (test, test_err), (val, _) = runs[()], runs[("--split", "val")]
    assert (test["split"], test["tasks"], val["split"], val["tasks"]) == ("test", 3, "val", 2)
    assert all(t["task_id"].startswith("test-") for t in test["tasks_detail"])  # the generator's test tasks
    assert "eval test greedy: 3/3 episodes" in test_err
    only_val = json.loads(config.read_text())
    only_val["data"] = {"val_files": [str(tmp_path / "v.jsonl")]}
    config.write_text(json.dumps(only_val))
    refused = CliRunner().invoke(app, ["eval", str(config), "--n", "0", "--quiet"])
    assert refused.exit_code == 2 and "no test tasks" in refused.output and "--split val" in refused.output
