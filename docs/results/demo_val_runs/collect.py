"""Every committed run of the laptop demo's recipe, and the series they make (issue 58: every run reported).

Reads the raw files under docs/results/ (nothing is run): each demo summary (`summary*.json`), each log or test
output that prints the demo's summary, each RL metrics file (`*rl_metrics*.jsonl`). A run is the demo's recipe
(12 demonstrations, SFT 6 steps of 2, GRPO 3 chains x 8 a step, outcome reward) evaluated greedily and with one
sample at T=1 on the 64 held-out chains of the val split (the split the recipe was tuned on), before RL and after
its last step. Files of one run (its summary, its log, its metrics) are merged by the evaluation's run id
(`chains-demo-<unix time>-eval`) or, for metrics files, by the step-0 evaluation's time stamp.

Writes, next to this file:
- `runs.json`: per run the files it comes from, date, commit (where the file name or the page that reported the run
  records it), greedy and sampled successes before and after (counts of 64), wall time, CPU seconds, peak memory,
  load average; then the series of the 8-step runs (the demo's default since 2026-12-05) and of the 3-step runs.
- `README.md`: the table of every run and the series' n, median, min, max of the greedy gain, and how many runs
  gained less than +10 points.

    python docs/results/demo_val_runs/collect.py
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent
N_VAL = 64

# Commits not in a file's name, as the page that reported the run records them.
DOCUMENTED_COMMITS = {
    "demo_allocator_2026-12-05/summary_base.json": ("20348c1", "docs/benchmarks.md row 41 (before)"),
    "demo_allocator_2026-12-05/summary_A.json": ("eab170a", "docs/benchmarks.md row 41 (A)"),
    "demo_allocator_2026-12-05/summary_C.json": ("43407f1", "docs/benchmarks.md row 41 (C)"),
    "demo_allocator_2026-12-05/summary_D_glibc.json": ("43407f1", "docs/benchmarks.md row 41 (D)"),
    "demo_allocator_2026-12-05/summary_D2_glibc_arena_max_2.json": (
        "43407f1",
        "docs/benchmarks.md row 41 (D2 = D with MALLOC_ARENA_MAX=2)",
    ),
    "demo_engine_pools_2026-12-05/summary_R_jemalloc_purge_before_update.json": (
        "6bbb4ab",
        "docs/benchmarks.md row 49",
    ),
    "demo_8steps_2026-12-05/summary.json": ("cbc901c + 8 steps", "docs/results.md row B2 as of 8d44d49"),
    "demo_malloc_2026-12-05/kept_summary.json": ("d2adc4b", "docs/benchmarks.md row 32"),
    "demo_malloc_2026-12-05/default_summary.json": ("d2adc4b", "docs/benchmarks.md row 32"),
    "demo_2026-12-05/summary_loaded_vm.json": ("480c504 (+ val 64)", "docs/results.md row B"),
}

# The engine's dtype where the summary lacks it, as the folder's README records it.
DOCUMENTED_DTYPES = {
    "demo_memory_fp32_2026-12-05/pytest_demo_7cdde7e.txt": "float32",  # README there: Zen 1, no AVX-512 BF16
}


# The machine each folder's runs ran on, as its README or docs/benchmarks.md records it.
def machine(path: str) -> str | None:
    name = Path(path).name
    if path.startswith("demo_system_time_2026-12-06/"):
        if "_zen4_" in name:
            return "2-core Zen 4 VM"
        if "_intel207_" in name:
            return "2-core Intel VM (model 207)"
        return "2-core Intel VM"
    return {
        "demo_allocator_2026-12-05": "2-core Intel VM",
        "demo_engine_pools_2026-12-05": "2-core Intel VM",
        "demo_engine_cpu_2026-12-05": "2-core Zen 4 VM",
        "demo_memory_fp32_2026-12-05": "2-core Zen 1 VM",
    }.get(path.split("/")[0])


HEX = re.compile(r"(?<![0-9a-z])([0-9a-f]{7})(?![0-9a-z])")


def commit_of(path: str) -> tuple[str | None, str | None]:
    if path in DOCUMENTED_COMMITS:
        return DOCUMENTED_COMMITS[path]
    for token in HEX.findall(Path(path).stem):
        if re.search(r"\d", token) and re.search(r"[a-f]", token):
            return token, "file name"
    return None, None


def rel(p: Path) -> str:
    return p.relative_to(RESULTS).as_posix()


def count(x: float | None) -> int | None:
    return None if x is None else round(x * N_VAL)


def epoch_of(run_id: str | None) -> int | None:
    m = re.match(r"chains-demo-(\d+)-eval$", run_id or "")
    return int(m.group(1)) if m else None


def new_run(source: str) -> dict[str, Any]:
    return {
        "source": source,
        "also": [],
        "run_id": None,
        "t0": None,
        "rl_steps": None,
        "n_val": None,
        "engine_dtype": None,
        "greedy": None,
        "sampled": None,
        "wall_s": None,
        "wall_min_printed": None,
        "cpu_s": None,
        "peak_rss_gb": None,
        "load_average": None,
    }


def from_summary(path: Path, d: dict[str, Any]) -> dict[str, Any] | None:
    g, s = d.get("greedy"), d.get("sampled")
    if not (isinstance(g, dict) and isinstance(s, dict) and "before_episodes" in g):
        return None
    run = new_run(rel(path))
    run["run_id"] = g["before_episodes"].get("run_id")
    run["n_val"] = g["before_episodes"].get("sessions")
    evals = d.get("evaluations") or []
    run["t0"] = evals[0].get("time") if evals else None
    run["rl_steps"] = d.get("rl_steps")
    if run["rl_steps"] is None and g.get("after_episodes", {}).get("step", "").isdigit():
        run["rl_steps"] = int(g["after_episodes"]["step"])  # the after-evaluation's step is the last RL step
    run["engine_dtype"] = d.get("engine_dtype")
    run["greedy"] = [count(g["before"]), count(g["after"])]
    run["sampled"] = [count(s["before"]), count(s["after"])]
    for k in ("wall_s", "cpu_s", "peak_rss_gb", "load_average"):
        run[k] = d.get(k)
    return run


COUNT = re.compile(r"after (?:the warm start|(\d+) GRPO steps).*?(\d+)/(\d+) \(")


def from_text(path: Path, text: str) -> dict[str, Any] | None:
    """A demo log (its printed summary) or a test's output (the summary's JSON on one line)."""
    run = new_run(rel(path))
    ids = re.findall(r"chains-demo-\d+-eval", text)
    run["run_id"] = ids[0] if ids else None
    for line in text.splitlines():
        if line.startswith('{"greedy"'):
            try:
                d = json.loads(line)
            except ValueError:
                break  # cut short in the file: the run id above still ties it to its summary
            parsed = from_summary(path, d)
            if parsed:
                m = re.search(r"'rl_steps': (\d+)", text)
                parsed["rl_steps"] = int(m.group(1)) if m else None
                m = re.search(r"'time': ([0-9.]+)", text)
                parsed["t0"] = float(m.group(1)) if m else None
                return parsed
    pairs: dict[str, list[int]] = {}
    section = None
    for line in text.splitlines():
        if "greedy (temperature 0)" in line:
            section = "greedy"
        elif line.strip().startswith("sampled ("):
            section = "sampled"
        m = COUNT.search(line)
        if m and section:
            pairs.setdefault(section, []).append(int(m.group(2)))
            run["n_val"] = int(m.group(3))
            if m.group(1):
                run["rl_steps"] = int(m.group(1))
    if len(pairs.get("greedy", [])) != 2 or len(pairs.get("sampled", [])) != 2:
        return None
    run["greedy"], run["sampled"] = pairs["greedy"], pairs["sampled"]
    m = re.search(r"== summary \(([0-9.]+) min, peak memory ([0-9.]+) GB\)", text)
    if m:
        run["wall_min_printed"], run["peak_rss_gb"] = float(m.group(1)), float(m.group(2))
    return run


def from_metrics(path: Path) -> dict[str, Any] | None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    evals = [r for r in rows if "success/val_greedy" in r]
    if len(evals) < 2 or evals[0].get("val-core/chains-demo/acc/n_tasks") != N_VAL:
        return None
    run = new_run(rel(path))
    run["t0"] = evals[0].get("time")
    run["rl_steps"] = int(evals[-1]["step"])
    run["n_val"] = N_VAL
    run["greedy"] = [count(evals[0]["success/val_greedy"]), count(evals[-1]["success/val_greedy"])]
    run["sampled"] = [count(evals[0]["success/val"]), count(evals[-1]["success/val"])]
    return run


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a["run_id"] and b["run_id"]:
        return a["run_id"] == b["run_id"]
    return a["t0"] is not None and b["t0"] is not None and abs(a["t0"] - b["t0"]) < 1.0


def collect() -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []

    def add(run: dict[str, Any] | None) -> None:
        if run is None:
            return
        for r in runs:
            if same(r, run):
                r["also"].append(run["source"])
                for k, v in run.items():
                    if r.get(k) is None and v is not None and k not in ("source", "also"):
                        r[k] = v
                return
        runs.append(run)

    for p in sorted(RESULTS.rglob("*.json")):
        if HERE in p.parents:
            continue
        try:
            d = json.loads(p.read_text())
        except ValueError:
            continue
        if isinstance(d, dict):
            add(from_summary(p, d))
    for p in sorted([*RESULTS.rglob("*.log"), *RESULTS.rglob("*.txt")]):
        text = p.read_text(errors="replace")
        parsed = from_text(p, text)
        add(parsed)
        if parsed is None:  # no printed summary, but a run id another file has: list it with that run
            ids = set(re.findall(r"chains-demo-\d+-eval", text))
            for r in runs:
                if r["run_id"] in ids and rel(p) not in r["also"]:
                    r["also"].append(rel(p))
    for p in sorted(RESULTS.rglob("*.jsonl")):
        if "demo" in p.name or "rl_metrics" in p.name or p.parent.name.startswith("demo_"):
            try:
                add(from_metrics(p))
            except (ValueError, KeyError):
                continue
    out = []
    for r in runs:
        if r["n_val"] != N_VAL or r["greedy"] is None:
            continue
        epoch = epoch_of(r["run_id"]) or r["t0"]
        r["date"] = dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M") if epoch else None
        r["commit"], r["commit_from"] = commit_of(r["source"])
        r["machine"] = machine(r["source"])
        r["engine_dtype"] = r["engine_dtype"] or DOCUMENTED_DTYPES.get(r["source"])
        # time -v's report of a summary's run sits beside it as time_<same suffix>.txt
        src = RESULTS / r["source"]
        if src.name.startswith("summary_"):
            timing = src.with_name("time_" + src.stem[len("summary_") :] + ".txt")
            if timing.exists() and rel(timing) not in r["also"]:
                r["also"].append(rel(timing))
        r["split"] = "val"
        r["greedy_gain"] = r["greedy"][1] - r["greedy"][0]
        r["greedy_gain_points"] = round(100 * r["greedy_gain"] / N_VAL, 1)
        r["sampled_gain"] = r["sampled"][1] - r["sampled"][0]
        del r["t0"]
        out.append(r)
    out.sort(key=lambda r: (r["rl_steps"] or 0, r["date"] or ""))
    return out


def series(runs: list[dict[str, Any]]) -> dict[str, Any]:
    gains = [r["greedy_gain_points"] for r in runs]
    return {
        "n": len(runs),
        "greedy_gain_points": {"median": statistics.median(gains), "min": min(gains), "max": max(gains)},
        "greedy_gain_of_64": {
            "median": statistics.median(r["greedy_gain"] for r in runs),
            "min": min(r["greedy_gain"] for r in runs),
            "max": max(r["greedy_gain"] for r in runs),
        },
        "under_10_points": sum(g < 10 for g in gains),
        "greedy_not_better": sum(r["greedy_gain"] <= 0 for r in runs),
        "greedy_before_of_64": [min(r["greedy"][0] for r in runs), max(r["greedy"][0] for r in runs)],
        "greedy_after_of_64": [min(r["greedy"][1] for r in runs), max(r["greedy"][1] for r in runs)],
        "sampled_before_of_64": [min(r["sampled"][0] for r in runs), max(r["sampled"][0] for r in runs)],
        "sampled_after_of_64": [min(r["sampled"][1] for r in runs), max(r["sampled"][1] for r in runs)],
        "by_engine_dtype": {
            str(dtype): {
                "n": len(gs),
                "greedy_gain_of_64": {"median": statistics.median(gs), "min": min(gs), "max": max(gs)},
                "greedy_before_of_64": sorted({r["greedy"][0] for r in runs if r["engine_dtype"] == dtype}),
            }
            for dtype in sorted({r["engine_dtype"] for r in runs}, key=str)
            for gs in [[r["greedy_gain"] for r in runs if r["engine_dtype"] == dtype]]
        },
    }


def fmt_wall(r: dict[str, Any]) -> str:
    if r["wall_s"] is not None:
        return f"{r['wall_s'] / 60:.1f} min"
    return f"{r['wall_min_printed']} min" if r["wall_min_printed"] is not None else "-"


def table(runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| # | raw file (and the same run's other files) | date (UTC) | commit | engine | machine | greedy before -> after (gain) | T=1 before -> after | wall | peak | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        also = "".join(f"<br>`{a}`" for a in r["also"])
        load = f"{r['load_average'][0]:.1f}" if r["load_average"] else "-"
        peak = f"{r['peak_rss_gb']} GB" if r["peak_rss_gb"] is not None else "-"
        lines.append(
            f"| {i} | `{r['source']}`{also} | {r['date'] or '-'} | {r['commit'] or '-'} | {r['engine_dtype'] or '-'} | "
            f"{r['machine'] or '-'} | {r['greedy'][0]} -> {r['greedy'][1]} ({r['greedy_gain']:+d}, {r['greedy_gain_points']:+.1f} pts) | "
            f"{r['sampled'][0]} -> {r['sampled'][1]} | {fmt_wall(r)} | {peak} | {load} |"
        )
    return lines


def summary_lines(name: str, s: dict[str, Any]) -> list[str]:
    g, c = s["greedy_gain_points"], s["greedy_gain_of_64"]
    return [
        f"**{name}: n = {s['n']}; greedy gain median {c['median']:+g}/64 ({g['median']:+g} points), "
        f"min {c['min']:+d}/64 ({g['min']:+g}), max {c['max']:+d}/64 ({g['max']:+g}); "
        f"{s['under_10_points']} of {s['n']} runs under +10 points, {s['greedy_not_better']} with greedy success not above before.** "
        f"Greedy before {s['greedy_before_of_64'][0]}-{s['greedy_before_of_64'][1]}/64, after "
        f"{s['greedy_after_of_64'][0]}-{s['greedy_after_of_64'][1]}/64; T=1 (one sample) before "
        f"{s['sampled_before_of_64'][0]}-{s['sampled_before_of_64'][1]}/64, after "
        f"{s['sampled_after_of_64'][0]}-{s['sampled_after_of_64'][1]}/64. By the engine's dtype: "
        + "; ".join(
            f"not recorded: n = {v['n']}"
            if k == "None"
            else f"{k} n = {v['n']}, greedy gain median {v['greedy_gain_of_64']['median']:+g}/64, "
            f"{v['greedy_gain_of_64']['min']:+d} to {v['greedy_gain_of_64']['max']:+d}, SFT greedy "
            + "/".join(map(str, v["greedy_before_of_64"]))
            + "/64"
            for k, v in s["by_engine_dtype"].items()
        )
        + "."
    ]


def main() -> None:
    runs = collect()
    eight = [r for r in runs if r["rl_steps"] == 8]
    three = [r for r in runs if r["rl_steps"] == 3]
    other = [r for r in runs if r["rl_steps"] not in (3, 8)]
    out = {
        "split": "val",
        "n_val": N_VAL,
        "series_8_steps": series(eight),
        "series_3_steps": series(three) if three else None,
        "runs_8_steps": eight,
        "runs_3_steps": three,
        "runs_other": other,
    }
    (HERE / "runs.json").write_text(json.dumps(out, indent=1) + "\n")
    readme = [
        "# Every committed run of the laptop demo's recipe on the 64 val chains",
        "",
        "Written by `python docs/results/demo_val_runs/collect.py` from the raw files under `docs/results/` (it runs",
        "nothing); `runs.json` has the same runs with every field. A run: 12 expert demonstrations, SFT 6 steps of 2,",
        "GRPO 3 chains x 8 samples a step with the outcome as the reward (`scripts/demo`, `examples/chains/demo.py`),",
        "held-out success of the SFT policy and of the last RL step on the **64 chains of the val split**, greedily and",
        "with one sample at T=1. **Val is the split the recipe (its settings and its step count) was chosen on**: these",
        "runs say how the demo behaves run to run, not how it generalises to chains nobody tuned on (the test split,",
        "issue 58). Most runs were made to measure time and memory: their settings differ in the allocator, the",
        "engine's dtype (float32 where the CPU has no AVX-512 BF16, or forced), cache and micro-batch sizes (the file",
        "names and the folders' READMEs / docs/benchmarks.md say which); none of them names a change to the learning",
        "settings.",
        "Not here: `chains_seeds_8steps_cpu_2026-12-05/` (the same recipe on 128 chains under `agentr1 eval --compare`,",
        "results row A2) and the 2026-12-04 runs on 32 chains at T=1 only (`chains_cpu_demo/`, results rows 3-4).",
        "Commits: from the file name, else as the page that reported the run records it (`commit_from` in runs.json);",
        "`-` where nothing records it. Wall: the demo's own `wall_s` (after install), else the minutes its log printed.",
        "",
        "## 8 GRPO steps (the default since 2026-12-05; results row B2)",
        "",
        *summary_lines("8 steps", out["series_8_steps"]),
        "",
        *table(eight),
        "",
    ]
    if three:
        readme += [
            "## 3 GRPO steps (the default before; results row B)",
            "",
            *summary_lines("3 steps", out["series_3_steps"]),
            "",
            *table(three),
            "",
        ]
    if other:
        readme += ["## Other step counts", "", *table(other), ""]
    (HERE / "README.md").write_text("\n".join(readme))
    s = out["series_8_steps"]
    print(json.dumps({"8_steps": s, "3_steps": out["series_3_steps"], "other": len(other)}, indent=1))


if __name__ == "__main__":
    main()
