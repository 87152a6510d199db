"""SFT against SFT+RL under the evaluation protocol, per recipe and seed, from two `agentr1 eval --output` files each.

Usage: python scripts/gpu/protocol_summary.py OUT.json --pair RECIPE SEED SFT.json RL.json [--pair ...]

Each file is one evaluation's whole answer (`agentr1 eval ... --greedy --n K --output FILE`: the protocol's
``val-core/<source>/acc/<metric>`` keys and each task's outcomes). The paired tests are exactly those of
`agentr1 eval --compare SFT RL` (agentr1.trainer.compare_evaluations: McNemar's exact test on greedy success, a
paired bootstrap on the per-task mean@K and pass@K), computed from two evaluations of the same held-out tasks.
Writes OUT.json (one object per pair, then per recipe the mean and range over seeds) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from agentr1.trainer import compare_evaluations

__all__ = ["protocol_metrics", "summarise_pair"]


def protocol_metrics(answer: dict[str, Any]) -> dict[str, float]:
    """greedy@1, mean@K, pass@K (and their 95% interval ends) of one evaluation, without the data source."""
    out: dict[str, float] = {}
    for key, value in answer.items():
        if key.startswith("val-core/") and "/acc/" in key and not key.endswith(("/n_tasks", "/n_samples")):
            out[key.split("/acc/", 1)[1]] = value
    return out


def summarise_pair(recipe: str, seed: int, sft: dict[str, Any], rl: dict[str, Any]) -> dict[str, Any]:
    """One seed: both checkpoints' protocol metrics and the paired tests of SFT+RL against SFT."""
    tests = compare_evaluations(sft, rl)
    return {"recipe": recipe, "seed": seed, "sft_model": sft.get("model"), "rl_model": rl.get("model"),
            "tasks": len(sft.get("tasks_detail", [])), "sft": protocol_metrics(sft), "sft_rl": protocol_metrics(rl),
            "paired": [t.__dict__ for t in tests]}


def _pick(metrics: dict[str, float], prefix: str) -> float | None:
    return next((v for k, v in metrics.items() if k.startswith(prefix) and "/ci_" not in k), None)


def _spread(values: list[float]) -> dict[str, Any]:
    return {"per_seed": values, "mean": statistics.mean(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--pair", nargs=4, action="append", required=True, metavar=("RECIPE", "SEED", "SFT", "RL"))
    args = parser.parse_args()
    rows, missing = [], []
    for recipe, seed, sft_path, rl_path in args.pair:
        if not (Path(sft_path).is_file() and Path(rl_path).is_file()):
            missing.append({"recipe": recipe, "seed": int(seed), "sft": sft_path, "rl": rl_path})
            continue
        rows.append(summarise_pair(recipe, int(seed), json.loads(Path(sft_path).read_text()),
                                   json.loads(Path(rl_path).read_text())))
    recipes: dict[str, Any] = {}
    for recipe in dict.fromkeys(r["recipe"] for r in rows):
        mine = [r for r in rows if r["recipe"] == recipe]
        recipes[recipe] = {f"{stage}/{metric}": _spread([_pick(r[stage], metric) for r in mine])
                           for stage in ("sft", "sft_rl") for metric in ("greedy@1", "mean@", "pass@")}
    args.out.write_text(json.dumps({"pairs": rows, "recipes": recipes, "missing": missing}, indent=1))
    print("recipe  seed  tasks  greedy@1 SFT -> RL   mean@K SFT -> RL   pass@K SFT -> RL   McNemar p (greedy)")
    for r in rows:
        p = next((t["p_value"] for t in r["paired"] if t["method"] == "mcnemar"), float("nan"))
        cells = [f"{_pick(r['sft'], m):.3f} -> {_pick(r['sft_rl'], m):.3f}" for m in ("greedy@1", "mean@", "pass@")]
        print(f"{r['recipe']:7} {r['seed']:4}  {r['tasks']:5}  {cells[0]:18}  {cells[1]:17}  {cells[2]:17}  {p:.3g}")
    for m in missing:
        print(f"{m['recipe']:7} {m['seed']:4}  missing: {m['sft']} or {m['rl']}")


if __name__ == "__main__":
    main()
