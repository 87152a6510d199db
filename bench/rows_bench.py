"""The trainer's rows -> tensors -> advantages path, this tree against a git revision, in alternating rounds of one run.

    .venv/bin/python bench/rows_bench.py --before 1156a4b [--rows 128 512] [--rounds 4] [--repeat 5]

What a training step does between ``build_rows`` and the update's first verl call, on rows of the laptop demo's
shape (``examples/chains/demo.yaml``: a 258-token prompt, three model calls of 25-45 tokens with 30-token tool
results between them, groups of 8, GRPO, the default ``merged`` layout: one row per session):

- this tree: ``pad_rows`` once (the tensors), ``compute_batch_advantages`` on them (``agentr1.trainer.padded``);
- a revision before that (its ``agentr1.trainer.engine``): ``compute_advantages`` on the rows (lists -> trajectory
  tensors -> lists), then the update's ``pad_rows(rows, need_advantages=True)`` (lists -> tensors again).

Each tree runs in a process of its own, one torch thread (the work is Python and small tensor ops), the
``--before`` tree as a ``git archive`` of that revision put first on ``PYTHONPATH`` (its ``src`` folder); rounds
alternate the order of the trees. A process builds the same rows (same seed), runs the path once to warm up, then
``--repeat`` times; printed per tree and row count: the milliseconds of each stage and of the whole path, the
median over every timed run of every round, and the ratio of the medians. Absolute times follow the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def demo_sessions(count: int, seed: int = 0) -> list:
    """``count`` append-only sessions of three calls in groups of 8, rewards 0 or 1 (a GRPO signal in most groups)."""
    from agentr1.store.records import SessionRecord, StepRecord

    rng = random.Random(seed)
    sessions = []
    for s in range(count):
        sid = f"s{s}"
        observation = [rng.randrange(100, 49000) for _ in range(258)]
        steps = []
        for call in range(3):
            action = [rng.randrange(100, 49000) for _ in range(rng.randrange(25, 46))]
            steps.append(StepRecord(sid, call, list(observation), action, [rng.uniform(-2.0, 0.0) for _ in action],
                                    parent_index=call - 1 if call else None))
            observation = observation + action + [rng.randrange(100, 49000) for _ in range(30)]
        sessions.append(SessionRecord(sid, group_id=f"g{s // 8}", status="finished", reward=float(rng.random() < 0.4),
                                      steps=steps))
    return sessions


def time_path(rows: int, repeat: int) -> dict[str, list[float]]:
    """Milliseconds of each stage of the path, ``repeat`` runs after one to warm up (in this tree's API)."""
    import torch

    from agentr1.trainer.algorithms import AdvantageConfig
    from agentr1.trainer.batch import BatchConfig, build_rows

    torch.set_num_threads(1)
    built = build_rows(demo_sessions(rows), BatchConfig(layout="merged")).rows
    assert len(built) == rows, len(built)
    config = AdvantageConfig("grpo")
    try:
        from agentr1.trainer.algorithms import compute_batch_advantages
        from agentr1.trainer.padded import pad_rows

        def path() -> dict[str, float]:  # this tree: tensors once
            started = time.perf_counter()
            batch = pad_rows(built)
            padded = time.perf_counter()
            compute_batch_advantages(batch, config)
            return {"pad_rows": padded - started, "advantages": time.perf_counter() - padded}
    except ImportError:  # a revision before the tensors were built once
        from agentr1.trainer.algorithms import compute_advantages
        from agentr1.trainer.engine.batch import pad_rows

        def path() -> dict[str, float]:
            started = time.perf_counter()
            compute_advantages(built, config)
            estimated = time.perf_counter()
            pad_rows(built, need_advantages=True)
            return {"advantages": estimated - started, "pad_rows": time.perf_counter() - estimated}

    path()
    runs: dict[str, list[float]] = {"pad_rows": [], "advantages": [], "path": []}
    for _ in range(repeat):
        stages = path()
        for name, seconds in stages.items():
            runs[name].append(seconds * 1000)
        runs["path"].append(sum(stages.values()) * 1000)
    return runs


def run_tree(src: Path, rows: int, repeat: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", str(rows), "--repeat", str(repeat)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="git revision to compare the working tree with")
    parser.add_argument("--rows", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per process")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(time_path(args.child, args.repeat)))
        return
    if not args.before:
        parser.error("--before is required")
    tmp = Path(tempfile.mkdtemp(prefix="agentr1-rows-bench-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", str(tmp)], input=archive, check=True)
    trees = {"before": tmp / "src", "after": ROOT / "src"}
    for rows in args.rows:
        runs: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
        for k in range(args.rounds):
            for label in (list(trees) if k % 2 == 0 else list(trees)[::-1]):
                for stage, ms in run_tree(trees[label], rows, args.repeat).items():
                    runs[label].setdefault(stage, []).extend(ms)
        medians = {label: {stage: statistics.median(ms) for stage, ms in stages.items()}
                   for label, stages in runs.items()}
        for label, stages in medians.items():
            spread = f"{min(runs[label]['path']):.1f}-{max(runs[label]['path']):.1f}"
            print(f"{rows} rows, {label:6s} median ms: pad_rows {stages['pad_rows']:.1f}, advantages "
                  f"{stages['advantages']:.1f}, path {stages['path']:.1f} (runs {spread})")
        print(f"{rows} rows: after / before {medians['after']['path'] / medians['before']['path']:.3f}x "
              f"({medians['before']['path'] / medians['after']['path']:.1f}x faster)")
    print(f"load average {os.getloadavg()}; before = {args.before}; {args.rounds} rounds x {args.repeat} runs a tree")


if __name__ == "__main__":
    main()
