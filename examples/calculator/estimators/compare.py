"""The estimator comparison table: held-out success and wall time per estimator over seeds.

Reads ``<root>/<estimator>/seed<k>/metrics.jsonl`` (what ``run.sh`` in this folder writes) and
prints a Markdown table: held-out success before training and at the end (mean and min-max over
the seeds), the change, train-time reward at the last step, and wall time per run (sum of
``perf/step_s``, evaluations included). With ``--plot``, held-out success curves per estimator
(mean over seeds, the seeds' range shaded) go to ``<root>/curves.png``.

    python -m examples.calculator.estimators.compare out/estimators [--plot]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean

ESTIMATORS = ["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae", "steppo", "gigpo"]

__all__ = ["ESTIMATORS", "load_runs", "span", "table"]


def load_runs(root: Path) -> dict[str, list[list[dict[str, float]]]]:
    """estimator -> one metrics history per seed (runs that have not written metrics are left out)."""
    runs: dict[str, list[list[dict[str, float]]]] = {}
    for name in ESTIMATORS:
        for path in sorted((root / name).glob("seed*/metrics.jsonl")):
            history = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if history:
                runs.setdefault(name, []).append(history)
    return runs


def span(values: list[float], fmt: str = "{:.1%}") -> str:
    if not values:
        return "-"
    return f"{fmt.format(mean(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(runs: dict[str, list[list[dict[str, float]]]]) -> str:
    lines = ["| estimator | seeds | held-out success, start | held-out success, end | change | wall time per run (s) |",
             "|---|---|---|---|---|---|"]
    for name, histories in runs.items():
        val = [[h["success/val"] for h in hist if "success/val" in h] for hist in histories]
        start = [v[0] for v in val if v]
        end = [v[-1] for v in val if len(v) > 1]
        change = [v[-1] - v[0] for v in val if len(v) > 1]
        wall = [sum(h.get("perf/step_s", 0.0) for h in hist) for hist in histories]
        lines.append(f"| {name} | {len(histories)} | {span(start)} | {span(end)} | {span(change, '{:+.1%}')} | "
                     f"{span(wall, '{:.0f}')} |")
    return "\n".join(lines)


def plot(runs: dict[str, list[list[dict[str, float]]]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, histories in runs.items():
        curves = [{h["step"]: h["success/val"] for h in hist if "success/val" in h} for hist in histories]
        steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        if not steps:
            continue
        ys = [[c[s] for c in curves] for s in steps]
        ax.plot(steps, [mean(y) for y in ys], label=name)
        ax.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], alpha=0.15)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out success")
    ax.legend()
    fig.savefig(out, dpi=120, bbox_inches="tight")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    runs = load_runs(args.root)
    if not runs:
        raise SystemExit(f"no <estimator>/seed<k>/metrics.jsonl under {args.root}")
    print(table(runs))
    if args.plot:
        print(plot(runs, args.root / "curves.png"))


if __name__ == "__main__":
    main()
