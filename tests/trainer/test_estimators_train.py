"""Every registered advantage estimator trains for two steps of `agentr1 train`, sync and async, from
its recipe (examples/calculator/estimators/<name>.yaml: the calculator as a multi-turn tool
environment with GiGPO anchors), on a tiny random model; each run's metrics show the quantity
that makes the estimator what it is."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentr1.store import TraceStore
from agentr1.trainer.algorithms import AdvantageConfig, compute_advantages, list_adv_estimators
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.policy import LocalPolicy
from agentr1.trainer.rewards import assemble_rewards

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "examples" / "calculator" / "estimators"
AGENTR1 = str(Path(sys.executable).parent / "agentr1")
ESTIMATORS = ["gae", "steppo", "gigpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "grpo"]
NAMING = {"run_name", "db"}  # each recipe writes its own store and output directory


def short_tasks(split: str, n: int, seed: int) -> list[dict]:
    """The recipes' tasks, with answers of at most 8 tokens (the tiny model's replies are noise)."""
    from examples.calculator.calculator import make_easy_tasks

    return [{**task, "sampling": {"max_tokens": 8}} for task in make_easy_tasks(split, n, seed)]


def cpu_overrides(tmp_path: Path, model: Path, mode: str) -> list[str]:
    """The recipe at test size: the tiny model on CPU, 2 tasks x 3 samples, 2 steps, 1 held-out task,
    8-token answers. The random model never answers right, so a reward that varies between samples
    (the share of even token ids in the final action) is added: advantages are then not all zero."""
    overrides = [
        f"actor_rollout_ref.model={model}", "trainer.device=cpu", "trainer.total_training_steps=2",
        "data.train_size=8", "data.val_size=1", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=3",
        "actor_rollout_ref.rollout.max_concurrency=6", "actor_rollout_ref.actor.ppo_mini_batch_size=0",
        "actor_rollout_ref.actor.optim.lr=1e-3", "critic.optim.lr=1e-3", "reward.functions=[e2e_agent:token_reward]",
        "data.generator=test_estimators_train:short_tasks", f"db=sqlite:///{tmp_path / 'traces.db'}",
        f"trainer.default_local_dir={tmp_path / 'out'}",
        f"trainer.mode={mode}",
    ]
    if mode == "async":
        overrides.append("actor_rollout_ref.rollout.max_staleness=1")
    return overrides


def train(recipe: Path, overrides: list[str]) -> list[dict[str, float]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run([AGENTR1, "train", str(recipe), *overrides, "--quiet"], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=840)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = Path(next(o.split("=", 1)[1] for o in overrides if o.startswith("trainer.default_local_dir=")))
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_recipes_cover_every_estimator_and_differ_only_in_algorithm():
    assert sorted(p.stem for p in RECIPES.glob("*.yaml")) == list_adv_estimators() == sorted(ESTIMATORS)
    recipes = {name: yaml.safe_load((RECIPES / f"{name}.yaml").read_text()) for name in ESTIMATORS}
    for name, raw in recipes.items():
        assert raw["algorithm"]["adv_estimator"] == name
        rest = {k: v for k, v in raw.items() if k not in NAMING | {"algorithm"}}
        rest["trainer"] = {k: v for k, v in rest["trainer"].items() if k != "default_local_dir"}
        base = {k: v for k, v in recipes["grpo"].items() if k not in NAMING | {"algorithm"}}
        base["trainer"] = {k: v for k, v in base["trainer"].items() if k != "default_local_dir"}
        assert rest == base, f"{name}.yaml differs from grpo.yaml outside algorithm.*"


def critic_losses_on_a_fixed_batch(db: Path, model: Path, estimator: str, updates: int = 4) -> list[float]:
    """The value loss of ``updates`` critic updates on one batch: the sessions the run trained on."""
    with TraceStore.open(db) as store:
        run = next(r.id for r in store.list_runs() if not r.id.endswith("-eval") and r.n_sessions)
        sessions = [store.get_session(s.id) for s in store.list_sessions(run, status="finished", limit=100)]
    rows = build_rows(sessions, BatchConfig(layout="merged"), rewards=assemble_rewards(sessions)).rows
    policy = LocalPolicy(model, device="cpu", critic=True, critic_lr=1e-4, lr=1e-3, calculate_entropy=False)
    values = policy.compute_values(rows)
    for row, v in zip(rows, values, strict=True):
        row.values = v
    compute_advantages(rows, AdvantageConfig(adv_estimator=estimator, gamma=1.0, lam=0.95))
    return [policy.update_critic(rows)["critic/vf_loss"] for _ in range(updates)]


# each estimator once, the two loop modes alternating over them (both modes for all 14 pairs took ~35 min on
# this 2-core CPU: over the suite's budget); the critic estimators and GiGPO cover both modes between them
MODES = {name: ("sync", "async")[i % 2] for i, name in enumerate(ESTIMATORS)}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("estimator,mode", list(MODES.items()))
def test_estimator_trains_two_steps(estimator, mode, tmp_path, tiny_model_path):
    history = train(RECIPES / f"{estimator}.yaml", cpu_overrides(tmp_path, tiny_model_path, mode))
    steps = [h for h in history if h["step"] > 0]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        assert h["actor/optimizer_steps"] >= 1 and h["policy_version"] == h["step"]
        assert h["adv/abs_max"] > 1e-3, f"{estimator}: all advantages ~0 at step {h['step']}"
        assert h["failures/infrastructure"] == 0 and h["groups/dropped"] == 0
        # every step of the multi-turn episodes carries the environment's anchor
        assert h["batch/steps_env_anchor"] == h["batch/steps_used"] > h["adv/trajectories"]

    if estimator in ("gae", "steppo"):
        assert all(0 < h["critic/vf_loss"] < float("inf") for h in steps)
        losses = critic_losses_on_a_fixed_batch(tmp_path / "traces.db", tiny_model_path, estimator)
        assert all(later < earlier for earlier, later in itertools.pairwise(losses)), losses
    else:
        assert not any(k.startswith("critic/") for h in steps for k in h)
    if estimator == "gigpo":
        for h in steps:
            # step groups from the environment's anchors, beyond the first step (one group per task
            # there): with observation hashes, later steps of random samples would share none
            assert h["gigpo/step_groups_env"] == h["gigpo/step_groups"] > h["adv/groups"]
            assert h["gigpo/steps_grouped_env"] > h["adv/trajectories"]
    else:
        assert not any(k.startswith("gigpo/") for h in steps for k in h)
