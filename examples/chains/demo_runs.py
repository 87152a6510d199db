"""Repeat the laptop demo and report every run: the evidence behind the demo's learning claim.

Runs ``python -m examples.chains.demo`` (what ``scripts/demo`` runs, at its defaults unless overrides are given)
``--runs`` times, each into ``<out>/run_<k>``, one after the other; a run whose ``summary.json`` exists is read, not
run again, so an interrupted series resumes. Then writes ``<out>/runs.json``: per run the greedy and sampled
successes before and after RL on the test split's chains, the gain, wall time, CPU seconds, peak memory, the load
average and each held-out task's outcome; over the runs n, median, min and max of the greedy gain and whether RL
beat the warm start greedily in every run. Prints the table.

    python -m examples.chains.demo_runs [--runs 5] [--out out/demo_runs] [demo arguments ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "run_record", "series"]

ROOT = Path(__file__).resolve().parents[2]


def run_record(summary: dict[str, Any]) -> dict[str, Any]:
    """One run's row: successes as counts of the held-out chains, before and after, per decoding."""
    row: dict[str, Any] = {}
    for decoding in ("greedy", "sampled"):
        part = summary[decoding]
        n = part["before_episodes"]["sessions"]
        before, after = round(part["before"] * n), round(part["after"] * n)
        row[decoding] = {"n": n, "before": before, "after": after, "gain_points": round(100 * (after - before) / n, 1),
                         "per_task": part.get("per_task")}
    row.update({k: summary.get(k) for k in ("wall_s", "cpu_s", "peak_rss_gb", "load_average", "dtype")})
    return row


def series(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """n, median and spread of the greedy gain over the runs; every run's numbers stay in ``runs``."""
    gains = [r["greedy"]["gain_points"] for r in rows]
    return {"n": len(rows), "greedy_gain_points": {"median": statistics.median(gains), "min": min(gains),
                                                   "max": max(gains), "per_run": gains},
            "greedy_better_every_run": all(r["greedy"]["after"] > r["greedy"]["before"] for r in rows),
            "sampled_gain_points_median": statistics.median(r["sampled"]["gain_points"] for r in rows),
            "wall_s": [r["wall_s"] for r in rows], "runs": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m examples.chains.demo_runs", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default="out/demo_runs")
    args, demo_args = parser.parse_known_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    out = (ROOT / args.out).resolve()
    rows = []
    for k in range(1, args.runs + 1):
        run_dir = out / f"run_{k}"
        summary_file = run_dir / "summary.json"
        if not summary_file.exists():
            print(f"\n=== demo run {k}/{args.runs} -> {run_dir}", flush=True)
            proc = subprocess.run([sys.executable, "-m", "examples.chains.demo", "--out", str(run_dir), *demo_args],
                                  cwd=ROOT)
            if proc.returncode != 0:
                sys.exit(f"demo run {k} failed (exit {proc.returncode}); its logs are in {run_dir}")
        rows.append(run_record(json.loads(summary_file.read_text())))
    result = series(rows)
    (out / "runs.json").write_text(json.dumps(result, indent=2))
    print("\nrun  greedy before -> after (gain)   sampled before -> after   wall")
    for k, r in enumerate(rows, 1):
        g, s = r["greedy"], r["sampled"]
        print(f"{k:>3}  {g['before']:>3}/{g['n']} -> {g['after']:>3}/{g['n']} ({g['gain_points']:+.1f})"
              f"          {s['before']:>3} -> {s['after']:>3}            {r['wall_s'] / 60:.1f} min")
    gain = result["greedy_gain_points"]
    print(f"greedy gain over {result['n']} runs: median {gain['median']:+.1f} points (min {gain['min']:+.1f}, "
          f"max {gain['max']:+.1f}); better in every run: {result['greedy_better_every_run']}\nall: {out / 'runs.json'}")
    return result


if __name__ == "__main__":
    main()
