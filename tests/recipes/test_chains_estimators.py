"""The chains estimator recipes (examples/chains/estimators/) and their comparison (compare.py).

The recipes: one per registered estimator, identical but for ``algorithm.*`` (and their names and
output paths), and their algorithm blocks are the calculator recipes' (one definition of each
estimator's settings). The comparison: from a results folder laid out as scripts/gpu/compare_h200.sh
leaves it, the table, the issue-16 verdict and the PNG.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from examples.calculator.estimators.compare import ESTIMATORS
from examples.chains.estimators.compare import collect, issue16, table

from agentr1.trainer import JobConfig
from agentr1.trainer.algorithms import list_adv_estimators

ROOT = Path(__file__).resolve().parents[2]
CHAINS = ROOT / "examples" / "chains" / "estimators"
CALCULATOR = ROOT / "examples" / "calculator" / "estimators"


def _without(raw: dict, *keys: str) -> dict:
    rest = {k: v for k, v in raw.items() if k not in {"run_name", "db", "algorithm", *keys}}
    rest["trainer"] = {k: v for k, v in rest["trainer"].items() if k != "default_local_dir"}
    return rest


def test_the_chains_recipes_cover_every_estimator_and_differ_only_in_algorithm():
    assert sorted(p.stem for p in CHAINS.glob("*.yaml")) == list_adv_estimators() == sorted(ESTIMATORS)
    recipes = {name: yaml.safe_load((CHAINS / f"{name}.yaml").read_text()) for name in ESTIMATORS}
    for name, raw in recipes.items():
        assert raw["algorithm"] == yaml.safe_load((CALCULATOR / f"{name}.yaml").read_text())["algorithm"]
        assert _without(raw) == _without(recipes["grpo"]), f"{name}.yaml differs from grpo.yaml outside algorithm.*"
        JobConfig.model_validate(raw)  # every key is one the trainer knows
    gpu = yaml.safe_load((ROOT / "examples" / "chains" / "train_gpu.yaml").read_text())
    grpo = recipes["grpo"]
    assert grpo["agent"]["entrypoint"] == gpu["agent"]["entrypoint"]  # the same task and agent as the SFT runs
    assert {k: grpo["data"][k] for k in ("generator", "val_size")} == {k: gpu["data"][k] for k in ("generator", "val_size")}
    assert grpo["actor_rollout_ref"]["rollout"]["temperature"] == gpu["actor_rollout_ref"]["rollout"]["temperature"]


def _write(path: Path, *rows: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two estimators x 2 seeds as compare_h200.sh leaves them; gae's seed 2 was cut at step 2."""
    for seed, sft in (("1", 0.25), ("2", 0.30)):
        _write(tmp_path / f"seed{seed}" / "sft_eval_stats.json", {"success": sft, "tool_calls_per_success": 2.5})
        for name, end, steps in (("grpo", sft + 0.2, 4), ("gae", sft + 0.05, 4 if seed == "1" else 2)):
            run = tmp_path / "rl" / name / f"seed{seed}"
            _write(run / "metrics.jsonl", *({"step": k, "success/train": 0.2 + 0.05 * k, "perf/step_s": 20.0}
                                          for k in range(1, steps + 1)))
            _write(run / "run.json", {"estimator": name, "seed": int(seed), "rc": 0, "steps": steps, "steps_wanted": 4,
                                      "cut": steps < 4, "wall_s": 20.0 * steps})
            _write(run / "eval_step.json", {"step": steps})
            _write(run / "eval_stats.json", {"success": end, "tool_calls_per_success": 2.4})
    return tmp_path


def test_the_table_gives_spread_steps_and_cut_runs(results):
    data = collect(results, ["1", "2"])
    lines = table(data).splitlines()
    grpo = next(line for line in lines if line.startswith("| grpo "))
    gae = next(line for line in lines if line.startswith("| gae "))
    assert "| 27.5% (25.0%-30.0%) | 47.5% (45.0%-50.0%) | +20.0% (+20.0%-+20.0%) | 4 |" in grpo
    assert "| 2-4 (1 cut) |" in gae and "| 60 (40-80) |" in gae
    verdict = issue16(data)
    assert verdict["bar_met"] and abs(verdict["mean_gain"] - 0.2) < 1e-9


def test_the_issue16_bar_needs_every_seed(results):
    _write(results / "rl" / "grpo" / "seed2" / "eval_stats.json", {"success": 0.29, "tool_calls_per_success": 2.4})
    verdict = issue16(collect(results, ["1", "2"]))
    assert not verdict["bar_met"]  # seed 2 got worse, though the mean gain is ~+9.5 points


def test_the_command_writes_table_summary_and_png(results, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "examples.chains.estimators.compare", str(results), "--out", str(out),
                           "--seeds", "1", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["estimators_curves.png", "estimators_summary.json",
                                                     "estimators_table.md"]
    assert (out / "estimators_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "estimators_summary.json").read_text())["issue16"]["bar_met"] is True


def test_the_command_says_when_there_is_nothing_to_compare(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "examples.chains.estimators.compare", str(tmp_path), "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "no rl/<estimator>/seed<k>/" in proc.stderr
