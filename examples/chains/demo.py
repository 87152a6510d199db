"""The laptop demo (``scripts/demo``): a short warm start, then GRPO, on two-step arithmetic chains.

Stages, each the project's own command in a child process (so each stage's memory is returned
when it ends, and the peak resident memory of the whole demo is the largest stage's):

1. demonstrations: the chains expert on ``--demos`` training chains, replayed through a real gateway
   into the store (``python -m agentr1.trainer.sft.replay``, no model weights, seconds);
2. warm start: ``agentr1 sft`` on them, a deliberately small budget, so the policy is only partly
   competent and RL has something to learn;
3. RL: ``agentr1 train examples/chains/demo.yaml`` from the SFT checkpoint: held-out success of the
   SFT policy first (step 0: *before*, greedy and sampled), then GRPO steps, then held-out success again (*after*).

The RL stage runs in bfloat16 where the CPU multiplies it in hardware (``rollout.engine.dtype`` and
``actor.param_dtype`` in demo.yaml; on a CPU without AVX-512 BF16 or AMX ``agentr1 train`` and ``agentr1 eval`` run
such a job in float32 instead: ``agentr1.trainer.cpu_dtypes``). It trains on ``make_demo_tasks`` with the outcome alone as the reward (held-out
chains sampled under per-chain seeds, each call of an episode under its own), 3 chains x 8 samples a step for 8 steps
at lr 2e-5 in mini-batches of 2, learning only from the samples that beat their group
(``algorithm.advantage_floor: 0``). The stages run with glibc's mmap threshold at 4 MiB (:func:`_stage_env`).
Held-out chains are evaluated before and after under the evaluation protocol (docs/evaluation.md): greedily, and one
sample each at temperature 1; results in docs/results.md (the laptop demo's rows).

Then a summary: before -> after on the same held-out chains of the test split (``trainer.eval_split=test``: disjoint
from every training, validation and demonstration chain by construction, ``tasks.py``; no setting of the recipe was
chosen on them; ``--split val`` scores the val split instead, for choosing settings), tool calls per episode and
episode length from
the traces (``scripts/gpu/episode_stats.py``), where the curves, traces and checkpoint are, and the ``agentr1 view``
command. ``summary.json`` in the output folder holds it all, with wall time and peak memory.

    python -m examples.chains.demo [--out out/demo] [--demos 12] [--rl-steps 8] [--val 64] [--split test] [overrides ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentr1.trainer.cpu_dtypes import cpu_has_bfloat16_matmuls

__all__ = ["MODEL_SETTINGS", "agentr1_command", "children_cpu_s", "cpu_has_bfloat16_matmuls", "latest_checkpoint",
           "main", "run_stage", "summarize", "task_outcomes"]

ROOT = Path(__file__).resolve().parents[2]
DEMO_CONFIG = "examples/chains/demo.yaml"
SFT_CONFIG = "examples/chains/sft.yaml"
# Overrides of demo.yaml for a starting policy other than SmolLM2, chosen on the val split and applied before the
# command line's own (docs/results.md, the demo's rows). Qwen2.5-Coder-0.5B after its warm start solves most chains
# greedily but few at temperature 1 (its 151k-token vocabulary leaves a long tail): its training chains are
# sampled at 0.7, so that a group of 8 holds successes to learn from; held-out chains stay at 1 (the protocol).
MODEL_SETTINGS: dict[str, tuple[str, ...]] = {
    "qwen2.5-coder-0.5b": ("data.generator_kwargs.temperature=0.7", "actor_rollout_ref.rollout.temperature=0.7"),
}
SPLITS = {"test": "test split's chains (nobody trained or tuned on them)",
          "val": "val split's chains (for choosing settings; claims are made on test)"}


def children_cpu_s() -> float:
    """User + system CPU seconds of every finished child process."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


MMAP_THRESHOLD = 4 << 20  # glibc's mmap threshold for the stages (bytes)


def _stage_env() -> dict[str, str]:
    """The stages' environment: glibc's mmap threshold at 4 MiB unless the caller set one. The training code pins
    it at 128 KiB (``agentr1.trainer.policy.memory``: a dynamic threshold let the heap fragment to 19 GB), which
    makes every tensor over 128 KiB a fresh, zero-filled mapping: 174 of the demo's 1,374 CPU-seconds were system
    time. At 4 MiB: 110 of 1,272, peak 5.47 instead of 4.6 GiB (measured 2026-12-03 on the 2-core VM)."""
    return {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), **os.environ}


def run_stage(title: str, command: list[str], log: Path, stages: dict[str, dict[str, float]]) -> None:
    """Run one stage; its progress line (one per step) goes to the terminal, its log to ``log``;
    its wall and CPU seconds go to ``stages``."""
    print(f"\n== {title} ({time.strftime('%H:%M:%S')})", flush=True)
    started, cpu = time.monotonic(), children_cpu_s()
    with log.open("w") as err:
        proc = subprocess.run(command, cwd=ROOT, stderr=err, env=_stage_env())
    if proc.returncode != 0:
        tail = log.read_text().strip().splitlines()[-15:]
        sys.exit(f"{title} failed (exit {proc.returncode}); the last lines of {log}:\n" + "\n".join(tail))
    wall, cpu = time.monotonic() - started, children_cpu_s() - cpu
    stages[log.stem] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    print(f"   done in {wall:.0f} s ({cpu:.0f} CPU-s)", flush=True)


def agentr1_command() -> list[str]:
    """The ``agentr1`` command of this interpreter: its installed script, else the CLI's module (a lent GPU machine
    runs the repository from PYTHONPATH, nothing installed)."""
    script = Path(sys.executable).parent / "agentr1"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentr1.cli.main"]


def latest_checkpoint(folder: Path) -> Path:
    """The newest checkpoint's servable folder, ``<folder>/checkpoints/step_<k>/hf``."""
    steps = sorted((folder / "checkpoints").glob("step_*/hf"), key=lambda p: int(p.parent.name.split("_")[1]))
    if not steps:
        sys.exit(f"no checkpoint in {folder / 'checkpoints'}")
    return steps[-1]


def _peak_rss_gb() -> float:
    """The largest resident set of any finished child process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20


def _episode_stats(db_path: Path, step: str, decoding: str) -> dict[str, Any]:
    """Success, tool calls and model calls per episode of one evaluation pass (greedy or sampled) of the RL run,
    from the traces."""
    proc = subprocess.run([sys.executable, "scripts/gpu/episode_stats.py", str(db_path), "*-eval", "--step", step,
                           "--pass", decoding], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def task_outcomes(db: str, step: int, decoding: str) -> dict[str, float]:
    """Each held-out task's outcome reward in one evaluation pass (``greedy`` or ``sampled``) of the RL run's
    evaluation at ``step``: the raw per-task record behind the before -> after numbers."""
    from agentr1.store import TraceStore  # lazy: the stages run in child processes, this one only summarises

    with TraceStore.open(db) as store:
        run_id = next(r.id for r in store.list_runs(limit=10_000) if r.id.endswith("-eval"))
        marker = f"/step{step}/{decoding}/"
        return {str(s.task_id): float(s.reward or 0.0) for s in store.list_sessions(run_id, limit=1_000_000)
                if marker in (s.group_id or "")}


def summarize(out: Path) -> dict[str, Any]:
    """before -> after, greedy and sampled, from the RL run's metrics and its evaluation episodes in the store."""
    history = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [h for h in history if h.get("success/val") is not None or h.get("success/val_greedy") is not None]
    first, last = evals[0], evals[-1]
    summary: dict[str, Any] = {"rl_steps": last["step"], "evaluations": evals}
    for decoding, key in (("greedy", "success/val_greedy"), ("sampled", "success/val")):
        if key in first:
            summary[decoding] = {
                "before": first[key], "after": last[key],
                "before_episodes": _episode_stats(out / "traces.db", str(first["step"]), decoding),
                "after_episodes": _episode_stats(out / "traces.db", str(last["step"]), decoding),
                "per_task": {"before": task_outcomes(f"sqlite:///{out / 'traces.db'}", first["step"], decoding),
                             "after": task_outcomes(f"sqlite:///{out / 'traces.db'}", last["step"], decoding)}}
    protocol = [k for k in last if k.startswith("val-core/") and "/ci_" not in k]
    summary["protocol_before"] = {k: first[k] for k in protocol if k in first}
    summary["protocol_after"] = {k: last[k] for k in protocol}
    config = json.loads((out / "rl" / "config.json").read_text())
    summary.update(
        train_success=[h.get("success/train") for h in history if "success/train" in h],
        dtype=config["actor_rollout_ref"]["rollout"]["engine"]["dtype"],
        val_kwargs=config["actor_rollout_ref"]["rollout"]["val_kwargs"],
        checkpoint=str(latest_checkpoint(out / "rl")), curves=str(out / "rl" / "curves.png"),
        sft_curves=str(out / "sft" / "curves.png"))
    return summary


def _lines(summary: dict[str, Any], demos: int) -> str:
    """The before -> after lines of the summary, one pair per decoding."""
    titles = {"greedy": "greedy (temperature 0)", "sampled": "sampled (temperature of the rows, one sample each)"}
    text = []
    for decoding in ("greedy", "sampled"):
        if decoding not in summary:
            continue
        part = summary[decoding]
        b, a = part["before_episodes"], part["after_episodes"]
        n = b["sessions"]
        text.append(f"  {titles[decoding]}:")
        for label, value, eps in ((f"after the warm start ({demos} demos)", part["before"], b),
                                  (f"after {summary['rl_steps']} GRPO steps", part["after"], a)):
            text.append(f"    {label:<32} {round(value * n)}/{n} ({value:.0%}), {eps['tool_calls_per_episode']:.1f} "
                        f"tool calls and {eps['steps_per_episode']:.1f} model calls per episode")
    return "\n".join(text)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m examples.chains.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/demo", help="where the store, metrics and checkpoints go")
    parser.add_argument("--demos", type=int, default=12, help="expert demonstrations for the warm start")
    parser.add_argument("--sft-epochs", type=int, default=1)
    parser.add_argument("--sft-batch", type=int, default=2, help="demonstrations per SFT optimizer step")
    parser.add_argument("--sft-lr", type=float, default=5e-5)
    parser.add_argument("--rl-steps", type=int, default=8)
    parser.add_argument("--val", type=int, default=64, help="held-out chains of the split (a greedy run and one "
                        "sample each, before and after RL)")
    parser.add_argument("--split", choices=("test", "val"), default="test", help="the held-out split: test for "
                        "claims (nobody tuned on it), val for choosing settings")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="smollm2", help="the starting policy (a name or a HF directory)")
    parser.add_argument("overrides", nargs="*", help="more key.sub=value overrides of examples/chains/demo.yaml")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out = (ROOT / args.out).resolve()
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    out.mkdir(parents=True)
    db = f"sqlite:///{out / 'traces.db'}"
    stages: dict[str, dict[str, float]] = {}
    python, agentr1 = [sys.executable], agentr1_command()

    run_stage(f"1/3 expert demonstrations: {args.demos} training chains, replayed through the gateway",
         [*python, "-m", "agentr1.trainer.sft.replay", "examples.chains.expert:demonstrations", f"n={args.demos}",
          "size=short", "--db", str(out / "traces.db"), "--run-id", "chains-demos", "--model", args.model], out / "demos.log", stages)
    run_stage(
        f"2/3 warm start: SFT on the {args.demos} demonstrations, {args.sft_epochs} epoch(s)",
        [*agentr1, "sft", SFT_CONFIG, f"data.db={db}", f"trainer.default_local_dir={out / 'sft'}",
         f"model.path={args.model}", f"trainer.total_epochs={args.sft_epochs}",
         f"data.train_batch_size={args.sft_batch}", f"optim.lr={args.sft_lr}",
         f"trainer.device={args.device}"], out / "sft.log", stages)
    sft_checkpoint = latest_checkpoint(out / "sft")
    if args.device == "cpu" and not cpu_has_bfloat16_matmuls():  # agentr1 train runs demo.yaml's bfloat16 in float32
        print("   (this CPU has no bfloat16 matrix products (AVX-512 BF16 / AMX): RL in float32, about twice as long)")
    run_stage(f"3/3 RL: held-out success of the SFT policy on {args.val} chains, {args.rl_steps} GRPO steps, "
         "held-out success again",
         [*agentr1, "train", DEMO_CONFIG, f"db={db}", f"actor_rollout_ref.model={sft_checkpoint}",
          f"trainer.default_local_dir={out / 'rl'}", f"trainer.total_training_steps={args.rl_steps}",
          f"data.{args.split}_size={args.val}", f"trainer.eval_split={args.split}", f"trainer.device={args.device}",
          *MODEL_SETTINGS.get(args.model, ()), *args.overrides],
         out / "rl.log", stages)

    summary = summarize(out)
    summary.update(demos=args.demos, split=args.split, model=args.model,
                   overrides=[*MODEL_SETTINGS.get(args.model, ()), *args.overrides], sft_checkpoint=str(sft_checkpoint), wall_s=round(time.monotonic() - started, 1),
                   cpu_s=round(children_cpu_s(), 1), stages=stages,
                   peak_rss_gb=round(_peak_rss_gb(), 2), load_average=os.getloadavg(), db=db)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    run_id = next(summary[d]["before_episodes"]["run_id"] for d in ("greedy", "sampled") if d in summary)
    print(f"""
== summary ({summary['wall_s'] / 60:.1f} min, peak memory {summary['peak_rss_gb']:.1f} GB)
held-out success on the {SPLITS[args.split]}, before and after RL, under the same decoding:
{_lines(summary, args.demos)}
curves      {summary['curves']} (RL), {summary['sft_curves']} (SFT)
traces      {out / 'traces.db'}   (runs chains-demos, {run_id} and its training run)
checkpoint  {summary['checkpoint']}
look at them: .venv/bin/agentr1 view --db {db} --runs-dir {out}
all numbers: {out / 'summary.json'}""", flush=True)
    return summary


if __name__ == "__main__":
    main()
