"""Synchronous versus asynchronous training on the same agent workload, measured in one run.

The workload is what makes agent RL rollouts long-tailed: an agent that calls the model, calls a
tool whose latency is drawn from a seeded log-normal distribution (median ``--tool-median`` s,
shape ``--tool-sigma``; a few calls take many times the median), feeds the result back and
answers. ``--latency sample`` (the default) draws one latency per agent run, so the samples of one
task straggle independently, as real tool calls, sandboxes and browsers do; ``--latency task``
draws one per task, shared by its ``n`` samples (a group waits for one draw, milder on sync). The
real policy model (tiny random Llama by default, ``--model smollm2`` or a HF directory) generates
every token through the real gateway; the real verl engine updates it.

Both modes run the same tasks (same file, same order), the same ``--updates`` policy updates of
``--batch`` groups x ``--n`` samples, the same ``--concurrency`` bound on agent runs. The wall time
of ``Trainer.train()`` is compared (model loading excluded). Sync waits for the slowest sample of
each step and leaves serving idle during the update; async keeps rollouts going and drops groups
older than ``--max-staleness`` policy versions (their count is reported: work async wasted).

    .venv/bin/python bench/async_bench.py                      # CPU, tiny model
    .venv/bin/python bench/async_bench.py --device cuda --model smollm2 --updates 20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# -- the workload (imported by the trainer as ``async_bench:...``) -------------------------------


def make_tasks(n: int, *, samples: int, per: str, seed: int, median: float, sigma: float, cap: float,
               max_tokens: int) -> list[dict]:
    """Tasks with their tool latencies drawn once (seeded), so both modes see the same workload:
    ``tool_s`` holds one latency per sample (``per="sample"``) or one repeated ``samples`` times
    (``per="task"``)."""
    rng = random.Random(seed)

    def draw() -> float:
        return min(cap, median * math.exp(sigma * rng.gauss(0.0, 1.0)))

    tasks = []
    for i in range(n):
        latencies = [draw() for _ in range(samples)] if per == "sample" else [draw()] * samples
        tasks.append({"id": f"task-{i}", "question": f"Look up item {i} and summarise it.", "max_tokens": max_tokens,
                      "tool_s": latencies})
    return tasks


_started: dict[tuple[str | None, str], int] = {}  # (run, task) -> agent runs started
_started_lock = threading.Lock()


def _tool_latency(task: dict) -> float:
    """The k-th run of a task in this training run takes the task's k-th latency: the samples of a
    group are interchangeable, so each mode gets the same latencies per group whatever order its
    runs start in (the SDK session does not carry the sample index to the agent)."""
    from agentr1.sdk import current_session

    active = current_session()
    key = (active.run_id if active else None, task["id"])
    with _started_lock:
        k = _started.get(key, 0)
        _started[key] = k + 1
    return task["tool_s"][k % len(task["tool_s"])]


def agent(task: dict) -> str:
    """Model -> tool (sleeps its latency: an API, a sandbox, a browser) -> model."""
    from agentr1.sdk import openai_client

    client = openai_client()
    tool_s = _tool_latency(task)
    messages = [{"role": "user", "content": task["question"]}]
    first = client.chat.completions.create(model="policy", messages=messages, max_tokens=task["max_tokens"],
                                           temperature=1.0)
    time.sleep(tool_s)
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": f"Tool result: item found after {tool_s:.1f} s."}]
    final = client.chat.completions.create(model="policy", messages=messages, max_tokens=task["max_tokens"],
                                           temperature=1.0)
    return final.choices[0].message.content or ""


def reward(session, task) -> float:
    """Varies across the samples of a task (so group advantages are not all zero)."""
    ids = session.steps[-1].action_ids if session.steps else []
    return sum(i % 2 == 0 for i in ids) / max(1, len(ids))


# -- the measurement ----------------------------------------------------------------------------


def run_mode(mode: str, args: argparse.Namespace, work: Path, tasks_file: Path) -> dict:
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.loop import Trainer

    out = work / mode
    config = JobConfig.model_validate({
        "run_name": f"bench-{mode}", "db": f"sqlite:///{out / 'traces.db'}",
        "agent": {"entrypoint": "async_bench:agent", "timeout_s": 600},
        "data": {"train_files": [str(tasks_file)], "train_batch_size": args.batch, "shuffle": False},
        "reward": {"functions": ["async_bench:reward"]},
        "actor_rollout_ref": {"model": args.model, "rollout": {"n": args.n, "max_concurrency": args.concurrency,
                                                               "max_staleness": args.max_staleness},
                              "actor": {"optim": {"lr": 1e-5}}},
        "trainer": {"total_training_steps": args.updates, "default_local_dir": str(out / "out"),
                    "device": args.device, "mode": mode, "resume": False},
    })
    out.mkdir(parents=True)
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
    finally:
        trainer.close()
    history = [json.loads(line) for line in (out / "out" / "metrics.jsonl").read_text().splitlines()]
    updates = [h for h in history if h["step"] > 0]
    return {
        "wall_s": wall, "updates": len(updates),
        "policy_version": updates[-1]["policy_version"],
        "sessions_trained": sum(h.get("batch/sessions_in", 0.0) for h in updates),
        "rows_trained": sum(h.get("actor/rows", 0.0) for h in updates),
        "update_s_mean": sum(h.get("perf/update_s", 0.0) for h in updates) / len(updates),
        # steady state: the first step also pays for filling the pipeline (async) or nothing extra (sync)
        "step_s_mean_after_first": sum(h["perf/step_s"] for h in updates[1:]) / max(1, len(updates) - 1),
        "dropped_stale_groups": sum(h.get("async/dropped_stale", 0.0) for h in updates),
        "mean_lag": sum(h.get("async/mean_lag", 0.0) for h in updates) / len(updates),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny | smollm2 | a HF model directory")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--batch", type=int, default=2, help="task groups per update (data.train_batch_size)")
    parser.add_argument("--n", type=int, default=4, help="samples per task")
    parser.add_argument("--concurrency", type=int, default=8, help="agent runs at a time (both modes)")
    parser.add_argument("--max-staleness", type=int, default=2)
    parser.add_argument("--latency", choices=("sample", "task"), default="sample",
                        help="one tool latency per agent run (stragglers within a group) or per task")
    parser.add_argument("--tool-median", type=float, default=3.0, help="median tool latency (s)")
    parser.add_argument("--tool-sigma", type=float, default=1.0, help="log-normal shape: the tail's weight")
    parser.add_argument("--tool-cap", type=float, default=20.0, help="longest tool call (s)")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per model call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    for name in ("updates", "batch", "n", "concurrency", "max_staleness", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the trainer imports async_bench:agent
    with tempfile.TemporaryDirectory(prefix="agentr1-async-bench-") as tmp:
        work = Path(tmp)
        tasks = make_tasks(args.updates * args.batch * (args.max_staleness + 3), samples=args.n, per=args.latency,
                           seed=args.seed, median=args.tool_median, sigma=args.tool_sigma, cap=args.tool_cap,
                           max_tokens=args.max_tokens)
        tasks_file = work / "tasks.jsonl"
        tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks))
        delays = sorted(s for t in tasks for s in t["tool_s"])
        results = {"sync": run_mode("sync", args, work, tasks_file), "async": run_mode("async", args, work, tasks_file)}
    results["speedup"] = results["sync"]["wall_s"] / results["async"]["wall_s"]
    results["workload"] = {**{k: v for k, v in vars(args).items() if k != "json"},
                           "tool_s_median": delays[len(delays) // 2], "tool_s_p90": delays[int(len(delays) * 0.9)],
                           "tool_s_max": delays[-1]}
    print(json.dumps(results, indent=2, default=str))
    print(f"sync {results['sync']['wall_s']:.1f} s, async {results['async']['wall_s']:.1f} s for "
          f"{args.updates} updates: {results['speedup']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
