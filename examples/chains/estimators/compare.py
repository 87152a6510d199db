"""The chains estimator comparison (issue 17) and SFT vs SFT+RL (issue 16): table, summary and curves.

Reads what ``scripts/gpu/compare_h200.sh`` leaves under its results folder ROOT:

- ``ROOT/seed<k>/sft_eval_stats.json``: the SFT checkpoint of seed k on the held-out chains (step 0 of every
  RL run of that seed);
- ``ROOT/rl/<estimator>/seed<k>/``: ``metrics.jsonl`` (per step: ``success/train``, ``perf/step_s``),
  ``run.json`` (steps reached, whether the deadline cut the run, wall time), ``eval_stats.json`` and
  ``eval_step.json`` (held-out success of the run's last checkpoint and its step).

Writes to OUT: ``estimators_table.md`` (per estimator over the seeds: held-out success at step 0 and at the
end as mean (min-max), the change, steps reached, wall time per run, tool calls per successful episode),
``estimators_summary.json`` (every number, per seed; ``issue16``: GRPO against SFT per seed) and
``estimators_curves.png`` (training-batch success per step, mean over seeds with the range shaded;
held-out success at step 0 and at the end, per seed).

    python -m examples.chains.estimators.compare ROOT --out OUT [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean
from typing import Any

from examples.calculator.estimators.compare import ESTIMATORS, span

__all__ = ["collect", "issue16", "plot", "table"]


def _read(path: Path) -> Any:
    if not path.exists() or not path.read_text().strip():
        return None
    return json.loads(path.read_text().strip().splitlines()[-1])


def collect(root: Path, seeds: list[str]) -> dict[str, Any]:
    """Every run's numbers: {"sft": {seed: stats}, "runs": {estimator: {seed: {...}}}}."""
    sft = {s: _read(root / f"seed{s}" / "sft_eval_stats.json") for s in seeds}
    runs: dict[str, dict[str, Any]] = {}
    for name in ESTIMATORS:
        for seed in seeds:
            d = root / "rl" / name / f"seed{seed}"
            if not d.is_dir():
                continue
            metrics = d / "metrics.jsonl"
            history = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
            start = (sft.get(seed) or {}).get("success")
            final = _read(d / "eval_stats.json")
            runs.setdefault(name, {})[seed] = {
                "run": _read(d / "run.json") or {}, "eval_step": (_read(d / "eval_step.json") or {}).get("step"),
                "start": start, "end": final.get("success") if final else None, "eval": final,
                "train_curve": [(h["step"], h["success/train"]) for h in history if "success/train" in h],
                "step_s": [h["perf/step_s"] for h in history if "perf/step_s" in h]}
    return {"seeds": seeds, "sft": sft, "runs": runs}


def table(data: dict[str, Any]) -> str:
    lines = ["| estimator | seeds | held-out success, step 0 (SFT) | held-out success, end | change | steps reached "
             "| wall time per run (s) | s per step | tool calls per success, end |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, by_seed in data["runs"].items():
        runs = list(by_seed.values())
        start = [r["start"] for r in runs if r["start"] is not None]
        end = [r["end"] for r in runs if r["end"] is not None]
        change = [r["end"] - r["start"] for r in runs if r["end"] is not None and r["start"] is not None]
        steps = [r["eval_step"] for r in runs if r["eval_step"] is not None]
        cut = sum(bool(r["run"].get("cut")) for r in runs)
        wall = [r["run"]["wall_s"] for r in runs if "wall_s" in r["run"]]
        per_step = [mean(r["step_s"]) for r in runs if r["step_s"]]
        calls = [r["eval"]["tool_calls_per_success"] for r in runs if r["eval"]]
        reached = (f"{min(steps)}-{max(steps)}" if steps and min(steps) != max(steps) else str(steps[0]) if steps
                   else "-") + (f" ({cut} cut)" if cut else "")
        lines.append(f"| {name} | {len(end)}/{len(runs)} | {span(start)} | {span(end)} | {span(change, '{:+.1%}')} | "
                     f"{reached} | {span(wall, '{:.0f}')} | {span(per_step, '{:.1f}')} | {span(calls, '{:.2f}')} |")
    return "\n".join(lines)


def issue16(data: dict[str, Any]) -> dict[str, Any]:
    """GRPO (SFT+RL) against SFT per seed: the bar is +15 points on the mean and on every seed, and >= 2 tool
    calls per successful episode."""
    grpo = data["runs"].get("grpo", {})
    rows = {s: {"sft": r["start"], "sft_rl": r["end"], "gain": (r["end"] - r["start"])
                if r["end"] is not None and r["start"] is not None else None,
                "tool_calls_per_success": (r["eval"] or {}).get("tool_calls_per_success")}
            for s, r in grpo.items()}
    gains = [r["gain"] for r in rows.values() if r["gain"] is not None]
    calls = [r["tool_calls_per_success"] for r in rows.values() if r["tool_calls_per_success"] is not None]
    complete = bool(rows) and len(gains) == len(data["seeds"])
    return {"per_seed": rows, "mean_gain": mean(gains) if gains else None,
            "bar_met": complete and mean(gains) >= 0.15 and min(gains) > 0 and min(calls, default=0) >= 2}


def plot(data: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name, by_seed in data["runs"].items():
        curves = [dict(r["train_curve"]) for r in by_seed.values() if r["train_curve"]]
        steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        if steps:
            ys = [[c[s] for c in curves] for s in steps]
            line, = left.plot(steps, [mean(y) for y in ys], label=name)
            left.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], alpha=0.12, color=line.get_color())
    left.set_xlabel("RL step from the SFT checkpoint")
    left.set_ylabel("training-batch success (mean over seeds, range shaded)")
    names = list(data["runs"])
    for x, name in enumerate(names):
        for r in data["runs"][name].values():
            if r["start"] is not None and r["end"] is not None:
                right.plot([x - 0.15, x + 0.15], [r["start"], r["end"]], color="#888", lw=0.8)
                right.scatter([x - 0.15], [r["start"]], color="#9ab", s=14, zorder=3)
                right.scatter([x + 0.15], [r["end"]], color="k", s=14, zorder=3)
    right.set_xticks(range(len(names)), names, rotation=30, ha="right")
    right.set_ylabel("held-out success: SFT (grey) -> end of RL (black), per seed")
    for ax in (left, right):
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    if left.lines:
        left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", nargs="+", default=["1", "2", "3"])
    args = parser.parse_args()
    data = collect(args.root, args.seeds)
    if not data["runs"]:
        raise SystemExit(f"no rl/<estimator>/seed<k>/ under {args.root}")
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(data)
    (args.out / "estimators_table.md").write_text(text + "\n")
    summary = {**data, "issue16": issue16(data)}
    (args.out / "estimators_summary.json").write_text(json.dumps(summary, indent=1))
    print(text)
    print(json.dumps(summary["issue16"]))
    print(plot(data, args.out / "estimators_curves.png"))


if __name__ == "__main__":
    main()
