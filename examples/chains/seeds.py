"""The laptop demo's recipe over several seeds, each SFT and SFT+RL checkpoint evaluated under the evaluation
protocol on the same test chains: greedy@1, mean@K and pass@K at temperature 1, with paired tests
(``agentr1 eval --compare SFT RL``). This is how the recipe's learning claim is measured (docs/results.md).

Per seed k: the expert's demonstrations (their own seed), ``agentr1 sft`` (``trainer.seed=k``), ``agentr1 train
demo.yaml`` from that checkpoint (``trainer.seed=k``, ``data.seed=k``: other training chains; inside the run only a greedy
look at one chain), then ``agentr1 eval demo.yaml --split test --compare SFT RL --n K --temperature 1`` on ``--test``
chains of the test split (``data.seed`` 0's: the same chains for every seed, disjoint from every training,
demonstration and val chain by construction: nothing was tuned on them). Writes ``<out>/seed<k>/compare.json`` (each
task's outcomes), ``<out>/summary.json`` and prints a table; CPU seconds per stage are in the summary.

    python -m examples.chains.seeds [--seeds 1 2 3] [--test 128] [--n 8] [--out out/chains-seeds] [train overrides]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from examples.chains.demo import (
    DEMO_CONFIG,
    ROOT,
    SFT_CONFIG,
    agentr1_command,
    children_cpu_s,
    latest_checkpoint,
    run_stage,
)
from examples.chains.expert import DEMO_SEED

__all__ = ["main", "seed_row"]

METRICS = ("greedy@1", "mean@{k}", "pass@{k}")


def seed_row(compare: dict[str, Any], k: int) -> dict[str, float]:
    """One seed's line: SFT and SFT+RL under each metric, and the paired tests' p-values."""
    row: dict[str, float] = {}
    for side, name in (("a", "sft"), ("b", "rl")):
        answer = compare[side]
        for metric in METRICS:
            m = metric.format(k=k)
            key = next(x for x in answer if x.startswith("val-core/") and x.endswith(f"/acc/{m}"))
            row[f"{name}/{m}"] = answer[key]
    for test in compare["paired"]:
        row[f"p/{test['metric']}"] = test["p_value"]
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m examples.chains.seeds", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/chains-seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--test", type=int, default=128, help="test chains each checkpoint is evaluated on")
    parser.add_argument("--n", type=int, default=8, help="samples a task at temperature 1 (K of mean@K, pass@K)")
    parser.add_argument("--demos", type=int, default=12)
    parser.add_argument("--rl-steps", type=int, default=8)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default="cpu", help="where every stage runs (cpu, cuda)")
    parser.add_argument("overrides", nargs="*", help="more key.sub=value overrides of examples/chains/demo.yaml")
    args = parser.parse_args(argv)
    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    agentr1 = agentr1_command()
    rows, stages = {}, {}
    for seed in args.seeds:
        folder = out / f"seed{seed}"
        if folder.exists():
            subprocess.run(["rm", "-rf", str(folder)], check=True)
        folder.mkdir()
        db = f"sqlite:///{folder / 'traces.db'}"
        done: dict[str, dict[str, float]] = {}
        run_stage(f"seed {seed}: {args.demos} demonstrations",
             [sys.executable, "-m", "agentr1.trainer.sft.replay", "examples.chains.expert:demonstrations",
              f"n={args.demos}", "size=short", f"seed={DEMO_SEED + seed}", "--db", str(folder / "traces.db"),
              "--run-id", "chains-demos", "--model", args.model], folder / "demos.log", done)
        run_stage(f"seed {seed}: SFT", [*agentr1, "sft", SFT_CONFIG, f"data.db={db}", f"model.path={args.model}",
                                   f"trainer.default_local_dir={folder / 'sft'}", "data.train_batch_size=2",
                                   "trainer.total_epochs=1", "optim.lr=5e-5", f"trainer.seed={seed}",
                                   f"trainer.device={args.device}"], folder / "sft.log", done)
        sft = latest_checkpoint(folder / "sft")
        run_stage(f"seed {seed}: RL, {args.rl_steps} GRPO steps",
             [*agentr1, "train", DEMO_CONFIG, f"db={db}", f"actor_rollout_ref.model={sft}",
              f"trainer.default_local_dir={folder / 'rl'}", f"trainer.total_training_steps={args.rl_steps}",
              f"trainer.seed={seed}", f"data.seed={seed}", "data.val_size=1", "actor_rollout_ref.rollout.val_kwargs.n=0",
              f"trainer.device={args.device}", *args.overrides], folder / "rl.log", done)
        rl = latest_checkpoint(folder / "rl")
        run_stage(f"seed {seed}: SFT against SFT+RL on {args.test} test chains (greedy, {args.n} samples at T=1)",
             [*agentr1, "eval", DEMO_CONFIG, f"db={db}", f"data.test_size={args.test}", f"trainer.device={args.device}",
              "--split", "test", "--compare", str(sft), str(rl), "--n", str(args.n), "--temperature", "1.0",
              "--output", str(folder / "compare.json"), "--run-id", "eval"], folder / "eval.log", done)
        rows[seed] = seed_row(json.loads((folder / "compare.json").read_text()), args.n)
        stages[seed] = done
        print(json.dumps({"seed": seed, **rows[seed]}), flush=True)
    summary = {"seeds": rows, "stages": stages, "split": "test", "test": args.test, "n": args.n, "demos": args.demos,
               "rl_steps": args.rl_steps, "device": args.device, "cpu_s": round(children_cpu_s(), 1), "date": time.strftime("%Y-%m-%d"),
               "mean": {key: statistics.mean(r[key] for r in rows.values()) for key in next(iter(rows.values()))}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    keys = [m.format(k=args.n) for m in METRICS]
    print("\nseed  " + "  ".join(f"SFT {m:<9} RL {m:<9}" for m in keys) + "  p(greedy)")
    for seed, row in rows.items():
        print(f"{seed:<5} " + "  ".join(f"{row[f'sft/{m}']:<13.3f} {row[f'rl/{m}']:<12.3f}" for m in keys)
              + f"  {row.get('p/greedy@1', float('nan')):.3g}")
    return summary


if __name__ == "__main__":
    main()
