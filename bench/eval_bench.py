"""What an episode of ``agentr1 eval`` costs against one of the trainer's own validation, same tasks, same checkpoint.

    .venv/bin/python bench/eval_bench.py --checkpoint out/demo/sft/checkpoints/step_6/hf            # the demo's job
    .venv/bin/python bench/eval_bench.py --checkpoint CKPT --split val --tasks 64 --repeat 3 --modes trainer,eval

Modes, run in turn ``--repeat`` times (trainer, eval, eval-job-engine, trainer, ...), each in a child process of its
own (a cold start each, as a user runs them; nothing one leaves behind in memory or caches helps the next) on the
allocator the ``agentr1`` command gives them (jemalloc where the system has it: ``agentr1.core.preload_jemalloc``; on
glibc the trainer's process, whose policy pins the mmap threshold at 128 KiB, spent its validation faulting in fresh
mappings: 143-181 s against the eval's 85-123 s for the same 128 episodes):

- ``trainer``: ``agentr1 train``'s validation, the held-out pass the demo prints before and after RL:
  :class:`~agentr1.trainer.Trainer` set up on the job (policy, embedded gateway, engine: not timed), then
  :meth:`~agentr1.trainer.Trainer.evaluate` on the split's tasks, timed.
- ``eval``: ``agentr1 eval``'s :func:`~agentr1.trainer.evaluate_checkpoint` as the command runs it (reproducible,
  progress on stderr, scored as episodes end), timed from the call (the engine's start included) and its episodes
  alone (``run_protocol``).
- ``eval-job-engine``: the same with the job's own engine settings (``agentr1 eval --job-engine``).
- ``eval-quiet``: ``eval`` without its progress (``agentr1 eval --quiet``: the sessions scored at the end).

Both run the job's protocol (``rollout.val_kwargs``: the demo's greedy pass and one sample a task). Per mode: seconds
per episode of the episodes alone (median, min-max over the repeats), the process's CPU seconds per episode over them
(less at the mercy of other work on a shared machine than the wall time), and the eval's whole call per episode; the load average
(1 min) at each run's end; sessions that failed for an infrastructure reason (``infra_failed``: a run with any is not a
measurement of the policy). Prints one JSON line per run, then a summary line; each run's stderr goes to ``--logs``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("trainer", "eval", "eval-job-engine", "eval-quiet")


def _cpu_s() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _job(args: argparse.Namespace, db: str, out: str) -> Any:
    from agentr1.trainer import JobConfig, fit_dtypes_to_cpu

    return fit_dtypes_to_cpu(JobConfig.from_yaml(args.config, [
        f"db={db}", f"actor_rollout_ref.model={args.checkpoint}", f"data.val_size={args.tasks}",
        f"data.test_size={args.tasks}", f"trainer.default_local_dir={out}", "trainer.total_training_steps=0",
        *args.set]))


def _trainer_validation(job: Any, split: str) -> dict[str, float]:
    from agentr1.trainer import Trainer
    from agentr1.trainer.agent_session import use_session_threads
    from agentr1.trainer.tasks import load_tasks

    trainer = Trainer(job, quiet=True)
    trainer.setup()
    try:
        trainer.run.val_tasks = load_tasks(job.data, split)

        async def validate() -> tuple[dict[str, float], float, float]:
            use_session_threads(2 * job.actor_rollout_ref.rollout.max_concurrency)  # as Trainer.train sets it
            started, cpu = time.perf_counter(), _cpu_s()
            metrics = await trainer.evaluate()
            return metrics, time.perf_counter() - started, _cpu_s() - cpu

        metrics, episodes_s, episodes_cpu_s = asyncio.run(validate())
    finally:
        trainer.close()
    return {"episodes_s": episodes_s, "episodes_cpu_s": episodes_cpu_s, "success_greedy": metrics.get("success/val_greedy", float("nan")),
            "infra_failed": metrics.get("success/val_greedy/infra_failed", 0.0) + metrics.get("success/val/infra_failed", 0.0)}


def _eval(job: Any, split: str, *, reproducible: bool, progress: bool) -> dict[str, float]:
    from agentr1.trainer import evaluate as evaluation

    timed: dict[str, float] = {}
    run_protocol = evaluation.run_protocol

    async def timed_protocol(*args: Any, **kwargs: Any) -> Any:
        started, cpu = time.perf_counter(), _cpu_s()
        try:
            return await run_protocol(*args, **kwargs)
        finally:
            timed["episodes_s"], timed["episodes_cpu_s"] = time.perf_counter() - started, _cpu_s() - cpu

    evaluation.run_protocol = timed_protocol  # type: ignore[assignment]
    started = time.perf_counter()
    answer = asyncio.run(evaluation.evaluate_checkpoint(job, None, split=split, protocol=job.actor_rollout_ref.rollout
                                                        .val_kwargs, progress_title="eval" if progress else None,
                                                        reproducible=reproducible))
    return {**timed, "call_s": time.perf_counter() - started, "success_greedy": answer["success_greedy"],
            "infra_failed": answer.get("success_greedy/infra_failed", 0.0) + answer.get("success/infra_failed", 0.0),
            "dtype": answer["dtype"]}


def child(args: argparse.Namespace) -> None:
    from agentr1.core import keep_freed_memory, malloc_in_use, preload_jemalloc

    preload_jemalloc()  # the allocator the `agentr1` command runs train and eval on (re-executes this process)
    keep_freed_memory()
    with tempfile.TemporaryDirectory() as tmp:
        job = _job(args, f"sqlite:///{tmp}/traces.db", f"{tmp}/out")
        if args.child == "trainer":
            result = _trainer_validation(job, args.split)
        else:
            result = _eval(job, args.split, reproducible=args.child != "eval-job-engine",
                           progress=args.child != "eval-quiet")
    per_task = int(job.actor_rollout_ref.rollout.val_kwargs.greedy) + job.actor_rollout_ref.rollout.val_kwargs.n
    print(json.dumps({"mode": args.child, "episodes": args.tasks * per_task, **result, "malloc": malloc_in_use(),
                      "load_1min": round(os.getloadavg()[0], 2)}))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        if not mine:
            continue
        per = sorted(r["episodes_s"] / r["episodes"] for r in mine)
        cpu = sorted(r["episodes_cpu_s"] / r["episodes"] for r in mine)
        row = {"s_per_episode": round(statistics.median(per), 3), "range": [round(per[0], 3), round(per[-1], 3)],
               "cpu_s_per_episode": round(statistics.median(cpu), 3), "cpu_range": [round(cpu[0], 3), round(cpu[-1], 3)],
               "load_1min": [r["load_1min"] for r in mine], "success_greedy": [r["success_greedy"] for r in mine]}
        if "call_s" in mine[0]:
            whole = sorted(r["call_s"] / r["episodes"] for r in mine)
            row["call_s_per_episode"] = round(statistics.median(whole), 3)
        out[mode] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="the checkpoint both evaluate (a HF dir or a model name)")
    parser.add_argument("--config", default="examples/chains/demo.yaml")
    parser.add_argument("--split", default="val", help="the tasks both run (val: the trainer's own)")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES[:3]))
    parser.add_argument("--set", action="append", default=[], help="more key=value overrides of the job")
    parser.add_argument("--logs", default=None, help="folder of each run's stderr (default: a new temporary one)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    runs = []
    logs = Path(args.logs or tempfile.mkdtemp(prefix="eval_bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    passed = ["--checkpoint", args.checkpoint, "--config", args.config, "--split", args.split, "--tasks",
              str(args.tasks), *(a for s in args.set for a in ("--set", s))]
    for k in range(args.repeat):
        for mode in args.modes.split(","):
            with (logs / f"{mode}-{k}.log").open("w") as err:
                proc = subprocess.run([sys.executable, __file__, *passed, "--child", mode], cwd=ROOT, check=True,
                                      stdout=subprocess.PIPE, stderr=err, text=True,
                                      env={**os.environ, "PYTHONPATH": str(ROOT)})
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    print(json.dumps({"summary": summary(runs), "tasks": args.tasks, "split": args.split,
                      "checkpoint": args.checkpoint, "config": args.config, "logs": str(logs)}))


if __name__ == "__main__":
    main()
