"""Prefix merging: tokens processed per update with merged rows versus one row per step.

Synthetic multi-turn agent traces with realistic sizes (defaults: 8 turns, a ~300-token system
prompt + ~40-token task, ~60-token actions, ~80-token tool results, a few template tokens per
turn), built the way the gateway stores them: each step's observation is the previous
observation + action + feedback (append-only). A second scenario rewrites the context every turn
(a sliding window keeping the system prompt and the last 2 turns), where prefix merging finds
nothing to merge and must fall back to one row per step.

    .venv/bin/python bench/merge_bench.py                       # defaults, prints a markdown table
    .venv/bin/python bench/merge_bench.py --turns 16 --sessions 256

"Tokens" is what a trainer forwards per update: the sum of row lengths (prompt + response; verl
packs rows without padding). "Padded" is rows x the longest row, for a trainer that pads.
"""

from __future__ import annotations

import argparse
import random
import time

from agentr1.store.records import SessionRecord, StepRecord
from agentr1.trainer.batch import BatchConfig, build_rows

# the mean token count of each part of a trace, and the option (--system, ...) that changes it
SIZES = {"system": 300, "task": 40, "action": 60, "tool": 80}
GLUE = 5  # chat-template tokens around a tool result / next turn


def _ids(rng: random.Random, mean: int) -> list[int]:
    n = max(1, round(rng.gauss(mean, mean * 0.25)))
    return [rng.randrange(10, 49_000) for _ in range(n)]


def make_sessions(n_sessions: int, turns: int, sizes: dict[str, int], *, window: int | None,
                  seed: int) -> list[SessionRecord]:
    """``sizes``: as :data:`SIZES`. ``window=None``: append-only history; else the observation keeps the system
    prompt, the task and the last ``window`` (action, feedback) pairs: a context policy that rewrites the history
    every turn."""
    rng = random.Random(seed)
    system = [rng.randrange(10, 49_000) for _ in range(sizes["system"])]
    sessions = []
    for s in range(n_sessions):
        task = _ids(rng, sizes["task"])
        history: list[list[int]] = []
        steps = []
        for t in range(turns):
            recent = history if window is None else history[-2 * window:]
            obs = [*system, *task, *(tok for part in recent for tok in part)]
            action = _ids(rng, sizes["action"])
            steps.append(StepRecord(f"s{s}", t, obs, action, [-0.7] * len(action), parent_index=t - 1 if t else None))
            history += [action, _ids(rng, sizes["tool"]) + [7] * GLUE]
        sessions.append(SessionRecord(f"s{s}", group_id=f"g{s // 8}", status="finished", reward=float(s % 2),
                                      steps=steps))
    return sessions


def measure(sessions: list[SessionRecord], layout: str) -> dict[str, float]:
    start = time.perf_counter()
    batch = build_rows(sessions, BatchConfig(layout=layout))
    seconds = time.perf_counter() - start
    lengths = [r.length for r in batch.rows]
    return {"rows": len(lengths), "tokens": sum(lengths), "padded": len(lengths) * max(lengths),
            "action": batch.metrics["action_tokens"], "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=64, help="trajectories per update (groups of 8)")
    parser.add_argument("--turns", type=int, default=8)
    for part, default in SIZES.items():
        parser.add_argument(f"--{part}", type=int, default=default)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = {part: getattr(args, part) for part in SIZES}

    print(f"{args.sessions} sessions x {args.turns} turns; system {sizes['system']}, task ~{sizes['task']}, "
          f"action ~{sizes['action']}, tool result ~{sizes['tool']} (+{GLUE} template) tokens\n")
    print("| history | layout | rows | tokens | padded tokens | action tokens | per_step tokens / tokens | build s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, window in (("append-only", None), ("sliding window (last 2 turns)", 2)):
        sessions = make_sessions(args.sessions, args.turns, sizes, window=window, seed=args.seed)
        per_step = measure(sessions, "per_step")
        for layout in ("per_step", "merged"):
            m = per_step if layout == "per_step" else measure(sessions, layout)
            ratio = per_step["tokens"] / m["tokens"]
            print(f"| {label} | {layout} | {m['rows']:,} | {m['tokens']:,} | {m['padded']:,} | {m['action']:,} | "
                  f"{ratio:.2f}x | {m['seconds']:.3f} |")


if __name__ == "__main__":
    main()
