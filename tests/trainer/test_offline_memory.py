"""docs/training.md's offline example (train on stored traces) at its memory defaults fits the memory it is given.

`agentr1 train` with an ``offline:`` section and no memory setting (``ppo_max_token_len_per_gpu``,
``gradient_checkpointing``, ... all "auto") trains the real SmolLM2-135M on stored sessions of demo-sized rows, with
``AGENTR1_MEMORY_GB`` telling it how much memory it may use (a machine of that size, simulated: the plan reads it as
it reads ``MemAvailable`` or a cgroup's limit). Its peak resident memory, read from the kernel's accounting of the
finished child (``getrusage(RUSAGE_CHILDREN).ru_maxrss`` in a small process that runs it), stays within what the plan
promised: the share of the limit it plans for. With the GPU's defaults (8,192 tokens a forward, no gradient
checkpointing) the same step needs far more (docs/training.md#memory-defaults-that-fit-the-machine)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1.store import StepRecord, TraceStore
from agentr1.trainer.policy import memory_budget as mb

AGENTR1 = str(Path(sys.executable).parent / "agentr1")
GIB = 2**30
LIMIT_GIB = 7.0  # a small laptop's free memory
GROUPS, SAMPLES, PROMPT, ACTION = 2, 4, 400, 200  # 8 rows of 600 tokens: 4,800 tokens a step


def store_sessions(db: Path, vocab: int, seed: int = 0) -> str:
    """Finished one-call sessions in task groups, as a gateway stores them: observation and action ids, the
    action's log-probs, an outcome reward that differs within each group (non-zero GRPO advantages)."""
    rng = random.Random(seed)
    store = TraceStore.open(f"sqlite:///{db}")
    run = store.create_run("collected")
    for g in range(GROUPS):
        prompt = [rng.randrange(100, vocab) for _ in range(PROMPT)]
        for k in range(SAMPLES):
            sid = store.create_session(run_id=run, task_id=f"t{g}", group_id=f"g{g}")
            action = [rng.randrange(100, vocab) for _ in range(ACTION)]
            store.append_steps([StepRecord(sid, 0, prompt, action, [-3.0] * ACTION, finish_reason="stop")])
            store.finish_session(sid, reward=float(k % 2))
    store.close()
    return run


# Runs the command as its child and prints the child's peak (getrusage(RUSAGE_CHILDREN).ru_maxrss, KiB). Measured from
# pytest's own process instead, the peak would be at least pytest's: a child started by vfork counts the parent's
# memory's high-water mark as its own when it execs (the kernel carries the old memory's peak into the new program's).
MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
sys.stderr.write(done.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(done.returncode)
"""


def run_measured(command: list[str], env: dict[str, str]) -> tuple[int, int, str]:
    """Exit status, peak resident bytes and stderr of ``command``, measured by a small process of its own."""
    done = subprocess.run([sys.executable, "-c", MEASURE, *command], env=env, capture_output=True, text=True)
    return done.returncode, int(done.stdout.strip().splitlines()[-1]) * 1024, done.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_offline_example_at_its_defaults_fits_the_memory_it_is_given(tmp_path: Path, smollm2_path: Path) -> None:
    shape = mb.ModelShape.from_model(smollm2_path)
    run = store_sessions(tmp_path / "collected.db", shape.vocab_size)
    config = {  # docs/training.md's offline example; no memory setting
        "run_name": "offline", "db": f"sqlite:///{tmp_path / 'trainer.db'}",
        "offline": {"db": f"sqlite:///{tmp_path / 'collected.db'}", "run_id": run, "statuses": ["finished"]},
        "data": {"train_batch_size": GROUPS},
        "actor_rollout_ref": {"model": str(smollm2_path)},
        "trainer": {"total_training_steps": 1, "default_local_dir": str(tmp_path / "out"), "device": "cpu"},
    }
    (tmp_path / "job.yaml").write_text(json.dumps(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AGENTR1_MEMORY_GB": str(LIMIT_GIB)}
    code, peak, stderr = run_measured([AGENTR1, "train", str(tmp_path / "job.yaml"), "--quiet"], env)
    assert code == 0, stderr[-3000:]

    (step,) = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert step["actor/optimizer_steps"] >= 1
    # the plan the run recorded: the CPU's defaults, a budget the limit holds, below the GPU's 8,192
    assert step["memory/gradient_checkpointing"] == 1.0 and step["memory/available_gb"] == LIMIT_GIB
    budget = int(step["memory/ppo_max_token_len_per_gpu"])
    assert mb.MIN_TOKENS < budget < GROUPS * SAMPLES * (PROMPT + ACTION), "several micro-batches a step"
    resolved = json.loads((tmp_path / "out" / "config.json").read_text())["actor_rollout_ref"]["actor"]
    assert resolved["ppo_max_token_len_per_gpu"] == budget and resolved["gradient_checkpointing"] is True
    # the bound: what the plan may use of the limit; the estimate it chose by is an upper bound of the real peak
    bound = LIMIT_GIB * mb.USABLE_SHARE * GIB
    assert step["memory/estimated_peak_gb"] * GIB <= bound
    assert peak <= bound, f"peak {peak / GIB:.2f} GiB over the plan's {bound / GIB:.2f} GiB (budget {budget})"
    # the GPU's defaults would have needed far more than the limit for the same rows
    gpu_peak = mb.update_bytes(shape, GROUPS * SAMPLES * (PROMPT + ACTION), checkpointing=False)
    assert gpu_peak > LIMIT_GIB * GIB
