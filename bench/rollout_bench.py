"""Rollout speed inside ``agentr1 train`` against the engine alone, in one run.

    .venv/bin/python bench/rollout_bench.py                                  # tiny random model, CPU
    .venv/bin/python bench/rollout_bench.py --model smollm2 --sessions 16 --n 4
    .venv/bin/python bench/rollout_bench.py --device cuda --model smollm2 --sessions 128 --n 8 --repeat 2  # H200

The rollout is the trainer's own path: :func:`agentr1.trainer.serving.start_serving` (the embedded
gateway and the ``local`` engine, as ``agentr1 train`` starts them) and
:func:`agentr1.trainer.rollout.collect` running the job's agent (``--job chains``: ``agentr1.envs:
run_task`` in the chains ``ChainEnv``, async, one OpenAI client per session; ``--job calculator``: the
calculator example's sync agent in the trainer's thread pool) for ``--sessions`` sessions at once.
``--turns K`` makes every chains session take exactly K model calls (a random model rarely calls the
tool; the trained H200 policy made ~3.6 calls a session).

Every engine request of the rollout is recorded (prompt ids, sampling, output length) and then
replayed on the same engine with no gateway and no agents: each session's calls in order, all
sessions at once (``max_new_tokens`` = the length sampled in the rollout). The ratio of the two
sampled-token rates is what the rollout path costs. The two alternate ``--repeat`` times, for each
of ``--modes``: ``thread`` (the engine's worker thread in this process, sharing the GIL with the
gateway and the agents), ``process`` (``LocalBackend(engine_process=True)``, what ``agentr1 train``
uses on a GPU) and ``eager`` (a thread, every arrival admitted at once: the engine before the
admission policy of ``Engine._admit_now``, agentr1/engine/engine.py).

Breakdown: CPU seconds of each thread during the rollout (engine worker, gateway event loop, agents'
event loop, thread pools), the engine's forward passes and prefills per call, the time calls spend in
the engine (submit to result) against the rollout's wall time. ``--pyspy FILE`` also records the
rollout with py-spy (``--gil``: only samples holding the GIL) as collapsed stacks.

``--set actor_rollout_ref.rollout.gateway_processes=K``: the rollout's sessions are served by K gateway processes
sharing the engine process (``agentr1.gateway.GatewayShards``); their calls are then read back from the store
(requests, lengths, and each call's span as the gateway timed it) and their CPU is reported per process.

Prints a markdown summary, then one JSON line (the last line of the output).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the examples package
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from examples.chains.env import ChainEnv  # noqa: E402

from agentr1.core import resolve_model  # noqa: E402
from agentr1.envs import StepResult, register_env  # noqa: E402
from agentr1.sdk import configure  # noqa: E402
from agentr1.store import TraceStore  # noqa: E402
from agentr1.trainer.agent_session import use_session_threads  # noqa: E402
from agentr1.trainer.config import JobConfig  # noqa: E402
from agentr1.trainer.rollout import AgentRunner, collect  # noqa: E402
from agentr1.trainer.serving import start_serving  # noqa: E402
from agentr1.trainer.tasks import load_tasks  # noqa: E402

JOBS = {"chains": ROOT / "examples/chains/train.yaml", "calculator": ROOT / "examples/calculator/train.yaml"}


@register_env("bench_fixed_turns_chain")
class FixedTurnsChain(ChainEnv):
    """The chains environment, but every episode takes exactly ``turns`` model calls: an answer
    without a tool call before the last turn is followed by a user message asking to check it."""

    def __init__(self, task: dict[str, Any], *, turns: int = 4, **kwargs: Any) -> None:
        super().__init__(task, **kwargs)
        self.turns, self.calls = turns, 0

    async def step(self, action: dict[str, Any]) -> StepResult:
        result = await super().step(action)
        self.calls += 1
        if self.calls >= self.turns:
            return StepResult(result.observation, result.reward, True, result.info)
        if result.done:
            self.history.append({"role": "user", "content": "Check that with the calculator, then answer again."})
            return StepResult(self.build_observation(), 0.0, False, result.info)
        return result


# -- measuring ------------------------------------------------------------------------------------

class Recorder:
    """Wraps the backend's ``generate``/``stream`` on the instance: every request, its output length
    and the seconds it spent in the engine."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.calls, self.spans = backend, [], []
        self.generate, self.stream = backend.generate, backend.stream
        backend.generate, backend.stream = self._generate, self._stream

    async def _generate(self, request: Any) -> Any:
        started = time.perf_counter()
        result = await self.generate(request)
        self.calls.append((request, len(result.output_ids), time.perf_counter() - started))
        self.spans.append((started, time.perf_counter()))
        return result

    async def _stream(self, request: Any) -> Any:
        started, n = time.perf_counter(), 0
        async for delta in self.stream(request):
            n += len(delta.token_ids)
            yield delta
        self.calls.append((request, n, time.perf_counter() - started))
        self.spans.append((started, time.perf_counter()))

    def load_steps(self, store: TraceStore, session_ids: list[str], wall_to_perf: float) -> None:
        """The calls as the gateway recorded them (``rollout.gateway_processes`` > 1: the shards' calls never pass
        through this process's backend): the requests from each step's prompt ids and sampling, a call's span from
        when its handler started (the step's ``latency_ms`` before it was stored) to when it was stored
        (``wall_to_perf``: perf_counter minus wall-clock time)."""
        from agentr1.core.generation import GenerateRequest, SamplingParams

        fields = set(SamplingParams.__dataclass_fields__)
        for sid in session_ids:
            for step in store.get_session(sid).steps:
                sampling = SamplingParams(**{k: v for k, v in step.sampling.items() if k in fields})
                request = GenerateRequest(list(step.observation_ids), sampling, session_id=sid)
                seconds = (step.latency_ms or 0.0) / 1000
                end = step.created_at.timestamp() + wall_to_perf
                self.calls.append((request, len(step.action_ids), seconds))
                self.spans.append((end - seconds, end))

    def take(self) -> list[tuple[Any, int, float]]:
        calls, self.calls, self.spans = self.calls, [], []
        return calls

    def timeline(self, start: float, end: float) -> dict[str, float]:
        """When the calls reached the backend and left it, in seconds from ``start`` (the rollout's), and the
        rollout's seconds after its last call left the backend (the agents' and the gateway's ends of sessions)."""
        if not self.spans:
            return {}
        arrivals = sorted(a for a, _ in self.spans)
        return {"first_call_s": round(arrivals[0] - start, 3),
                "median_call_s": round(arrivals[len(arrivals) // 2] - start, 3),
                "last_call_s": round(arrivals[-1] - start, 3),
                "after_last_answer_s": round(end - max(b for _, b in self.spans), 3)}


class LoopMonitor:
    """How the gateway's event loop spent a rollout, in phases. A task on the loop sleeps 1 ms at a time: how late
    each wake-up comes is time the loop was held by other work, its own callbacks or a wait for the GIL (minus the
    lateness of an idle loop, measured before). A thread reads the gateway thread's CPU clock every 5 ms: CPU
    against that busy time tells the loop's own work from its waits for the GIL."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.thread = gateway.server.thread
        self.wakes: list[tuple[float, float]] = []  # (when, how late)
        self.cpu: list[tuple[float, float]] = []  # (when, gateway thread CPU seconds)
        self.idle_lateness = 0.0
        self._running = False

    async def _wake_up(self) -> None:
        while self._running:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.wakes.append((now, max(0.0, now - before - 0.001)))

    def _read_cpu(self) -> None:
        clock = time.pthread_getcpuclockid(self.thread.ident)
        while self._running:
            self.cpu.append((time.perf_counter(), time.clock_gettime(clock)))
            time.sleep(0.005)

    async def start(self) -> None:
        self._running = True
        asyncio.run_coroutine_threadsafe(self._wake_up(), self.gateway.loop)
        threading.Thread(target=self._read_cpu, name="bench-loop-monitor", daemon=True).start()
        await asyncio.sleep(0.3)  # an idle loop's lateness, before the rollout
        idle = [late for _, late in self.wakes]
        self.idle_lateness = sorted(idle)[len(idle) // 2] if idle else 0.0
        self.wakes.clear()
        self.cpu.clear()

    def stop(self) -> None:
        self._running = False

    def phase(self, a: float, b: float) -> dict[str, float]:
        """Over [a, b] (perf_counter): the loop's busy share and the gateway thread's CPU share of the wall time."""
        wall = max(b - a, 1e-9)
        busy = sum(max(0.0, late - self.idle_lateness) for when, late in self.wakes if a < when <= b)
        inside = [c for when, c in self.cpu if a <= when <= b]
        cpu = inside[-1] - inside[0] if len(inside) > 1 else 0.0
        return {"wall_s": round(wall, 3), "loop_busy": round(min(1.0, busy / wall), 2), "gateway_cpu": round(cpu / wall, 2)}


def stat_cpu(stat: Path) -> float:
    """CPU seconds (user + system) in a ``/proc`` ``stat`` file: a process's or a thread's (Linux)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[str, float]:
    """CPU seconds used so far by each live thread of this process, by thread name (Linux)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            seconds = stat_cpu(task / "stat")
        except OSError:
            continue
        name = names.get(int(task.name), "native")
        name = "pool" if name.startswith(("ThreadPoolExecutor", "asyncio_")) else name
        out[name] = out.get(name, 0.0) + seconds
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in sorted(after) if after[k] - before.get(k, 0.0) > 0.005}


def engine_counters(backend: Any) -> dict[str, int]:
    backend.refresh_stats()  # an engine process: the counters of its clients' rows too
    s = backend.stats
    out: dict[str, float] = {k: int(getattr(s, k)) for k in ("forward_passes", "prefill_passes", "prefill_tokens",
                                                             "cached_tokens", "decode_steps", "tokens_generated",
                                                             "graph_captures")}
    out["busy_s"] = float(getattr(s, "busy_s", 0.0))
    out["graph_capture_s"] = float(getattr(s, "graph_capture_s", 0.0))
    out["graph_shapes"] = str(getattr(s, "graph_shapes", ""))  # type: ignore[assignment]
    return out


# -- the two runs ---------------------------------------------------------------------------------

def session_times(store: TraceStore, session_ids: list[str], start: float) -> dict[str, float]:
    """When the rollout's sessions were opened and finished (the store's timestamps), in seconds from ``start``."""
    records = [store.get_session(i, steps=False) for i in session_ids]
    opened = sorted(r.created_at.timestamp() - start for r in records if r.created_at is not None)
    finished = sorted(r.finished_at.timestamp() - start for r in records if r.finished_at is not None)
    if not opened or not finished:
        return {}
    return {"first_open_s": round(opened[0], 3), "median_open_s": round(opened[len(opened) // 2], 3),
            "last_open_s": round(opened[-1], 3), "last_finish_s": round(finished[-1], 3)}


async def rollout(serving: Any, store: TraceStore, recorder: Recorder, runner: AgentRunner, tasks: list[dict[str, Any]], *, n: int,
                  run_id: str, step: int, pyspy: str | None, gil: bool, switch_interval_s: float | None
                  ) -> dict[str, Any]:
    backend = serving.backend
    counters, cpu = engine_counters(backend), thread_cpu()
    spy = None
    if pyspy:
        cmd = [os.environ.get("PYSPY") or shutil.which("py-spy") or "py-spy", "record", "--pid", str(os.getpid()), "--format", "raw",
               "--output", pyspy, "--threads", "--rate", "200", "--nonblocking"] + (["--gil"] if gil else [])
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)
    shards = serving.shards.processes if serving.shards is not None else []
    monitor = LoopMonitor(serving.gateway)  # (with shards the loop that serves the calls is another process's)
    if not shards:
        await monitor.start()
    shard_cpu = [stat_cpu(Path(f"/proc/{p.pid}/stat")) for p in shards]
    started, wall_started = time.perf_counter(), time.time()
    report = await collect(runner, tasks, n=n, run_id=run_id, step=step, max_concurrency=len(tasks) * n,
                           switch_interval_s=switch_interval_s)
    ended = time.perf_counter()
    monitor.stop()
    shard_cpu = [round(stat_cpu(Path(f"/proc/{p.pid}/stat")) - before, 2) for p, before in zip(shards, shard_cpu, strict=True)]
    if shards:
        recorder.load_steps(store, report.sessions, started - wall_started)
    timeline = {**recorder.timeline(started, ended), **session_times(store, report.sessions, wall_started)}
    if shards:
        timeline["shard_cpu_s"] = shard_cpu
    elif "last_call_s" in timeline:  # the loop in three phases: calls arriving, the engine's, after the last answer
        last_call, last_answer = started + timeline["last_call_s"], ended - timeline["after_last_answer_s"]
        timeline["loop"] = {"arrivals": monitor.phase(started, last_call),
                            "to_last_answer": monitor.phase(last_call, last_answer),
                            "after_last_answer": monitor.phase(last_answer, ended),
                            "idle_lateness_ms": round(1000 * monitor.idle_lateness, 3)}
    if spy is not None:
        spy.send_signal(2)
        spy.wait(timeout=60)
    calls = recorder.take()
    tokens = sum(c[1] for c in calls)
    after = engine_counters(backend)
    delta = {k: after[k] - counters[k] for k in after if k != "graph_shapes"}
    captured = after["graph_shapes"].split()[-delta["graph_captures"]:] if delta["graph_captures"] else []  # type: ignore[attr-defined]
    return {"seconds": round(report.seconds, 3), "sessions": len(report.sessions), "failed": report.failed,
            "errors": report.errors[:2], "calls": len(calls), "tokens": tokens,
            "tokens_per_s": round(tokens / report.seconds, 1),
            "engine_s_per_call": round(sum(c[2] for c in calls) / max(1, len(calls)), 4),
            "prefill_tokens_per_call": round(delta["prefill_tokens"] / max(1, len(calls)), 1),
            "cached_tokens_per_call": round(delta["cached_tokens"] / max(1, len(calls)), 1),
            "forwards": delta["forward_passes"], "decode_steps": delta["decode_steps"],
            "prefill_passes": delta["prefill_passes"], "graph_captures": delta["graph_captures"],
            "graph_capture_s": round(delta["graph_capture_s"], 3), "graph_shapes": captured,
            "tokens_per_decode_step": round(delta["tokens_generated"] / max(1, delta["decode_steps"]), 2),
            "engine_busy_s": round(delta["busy_s"], 3),
            "ms_per_forward": round(1000 * delta["busy_s"] / max(1, delta["forward_passes"]), 2),
            **timeline, "thread_cpu_s": cpu_delta(cpu, thread_cpu())}, calls


async def engine_only(recorder: Recorder, calls: list[tuple[Any, int, float]], profile: bool = False
                      ) -> dict[str, Any]:
    """The rollout's requests on the engine alone: each session's calls in order, all sessions at once
    (through the backend's own ``generate``: not recorded). ``profile``: under torch.profiler (host ops of
    every thread and the device's kernels), its tables printed."""
    backend, generate = recorder.backend, recorder.generate
    sessions: dict[str, list[Any]] = {}
    for i, (request, length, _) in enumerate(calls):
        sessions.setdefault(request.session_id or f"call-{i}", []).append(
            replace(request, sampling=replace(request.sampling, max_new_tokens=max(1, length))))
    counters, cpu = engine_counters(backend), thread_cpu()

    async def one(requests: list[Any]) -> int:
        return sum([len((await generate(r)).output_ids) for r in requests])

    profiler = None
    if profile:
        from profiling import every_thread_profiler

        profiler = every_thread_profiler()
        profiler.start()
    started = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(rs) for rs in sessions.values())))
    seconds = time.perf_counter() - started
    if profiler is not None:
        profiler.stop()
        from profiling import print_tables

        print_tables(profiler, rows=25)
    after = engine_counters(backend)
    busy = after["busy_s"] - counters["busy_s"]
    return {"seconds": round(seconds, 3), "calls": len(calls), "tokens": tokens, "engine_busy_s": round(busy, 3),
            "ms_per_forward": round(1000 * busy / max(1, after["forward_passes"] - counters["forward_passes"]), 2),
            "tokens_per_s": round(tokens / seconds, 1), "forwards": after["forward_passes"] - counters["forward_passes"],
            "decode_steps": after["decode_steps"] - counters["decode_steps"],
            "prefill_passes": after["prefill_passes"] - counters["prefill_passes"],
            "graph_captures": after["graph_captures"] - counters["graph_captures"],
            "tokens_per_decode_step": round((after["tokens_generated"] - counters["tokens_generated"])
                                            / max(1, after["decode_steps"] - counters["decode_steps"]), 2),
            "thread_cpu_s": cpu_delta(cpu, thread_cpu())}


def job_config(args: argparse.Namespace, model: Path, out: Path) -> JobConfig:
    overrides = [f"db=sqlite:///{out / 'traces.db'}", f"actor_rollout_ref.model={model}",
                 f"actor_rollout_ref.rollout.n={args.n}", f"actor_rollout_ref.rollout.max_concurrency={args.sessions}",
                 f"trainer.device={args.device}", f"trainer.default_local_dir={out}",
                 f"data.train_size={max(64, args.sessions)}", "data.val_size=8", *args.set]
    return JobConfig.from_yaml(JOBS[args.job], overrides)


def bench_tasks(cfg: JobConfig, args: argparse.Namespace) -> list[dict[str, Any]]:
    tasks = load_tasks(cfg.data, "train")[: max(1, args.sessions // args.n)]
    if args.tokens:
        for task in tasks:
            task.setdefault("env_kwargs", {}).setdefault("sampling", {})["max_tokens"] = args.tokens
    if args.turns and args.job == "chains":
        for task in tasks:
            task["agent_name"] = "bench_fixed_turns_chain"
            task["env_kwargs"]["turns"] = args.turns
            task["env_kwargs"]["max_steps"] = args.turns + 1
    return tasks


async def one_mode(args: argparse.Namespace, cfg: JobConfig, store: TraceStore, model: Path, out: Path,
                   mode: str) -> dict[str, Any]:
    """Serving as ``agentr1 train`` starts it, the engine in a thread or a process of its own; ``eager``:
    in a thread, admitting every arrival at once (the engine's admission before the rollout work)."""
    run_id = f"rollout-bench-{mode}-{int(time.time())}"
    store.ensure_run(run_id, "rollout-bench")
    started = time.perf_counter()
    serving = start_serving(cfg, store, model, model, run_id=run_id, policy_version=0, log_dir=out / "servers",
                            engine_process=mode == "process")
    load_s = time.perf_counter() - started
    if mode == "eager":
        serving.backend.engine._admit_now = lambda batch: True
    try:
        configure(serving.url)
        recorder = Recorder(serving.backend)
        runner = AgentRunner(cfg.agent, gateways=serving.rollout_urls)
        if runner.workers is not None:  # agent.processes: their start is not the rollout's
            runner.workers.wait_ready()
        tasks = bench_tasks(cfg, args)
        # warm-up: a few sessions through the whole path (first forwards, graph captures, client pools)
        switch = cfg.actor_rollout_ref.rollout.switch_interval_s
        await rollout(serving, store, recorder, runner, tasks[:2], n=min(args.n, 2), run_id=run_id, step=0, pyspy=None,
                      gil=False, switch_interval_s=switch)
        pairs = []
        for k in range(args.repeat):
            pyspy = args.pyspy if k == args.repeat - 1 else None
            r, calls = await rollout(serving, store, recorder, runner, tasks, n=args.n, run_id=run_id, step=k + 1,
                                     pyspy=pyspy, gil=args.gil, switch_interval_s=switch)
            e = await engine_only(recorder, calls, profile=args.profile)
            pairs.append({"rollout": r, "engine_only": e, "ratio": round(r["tokens_per_s"] / e["tokens_per_s"], 3)})
    finally:
        if "runner" in locals():
            runner.close()
        serving.close()
    best = max(pairs, key=lambda p: p["ratio"])
    return {"mode": mode, "load_s": round(load_s, 1), "ratio": best["ratio"], "ratios": [p["ratio"] for p in pairs],
            "rollout_tokens_per_s": best["rollout"]["tokens_per_s"],
            "engine_tokens_per_s": best["engine_only"]["tokens_per_s"], "rollout_s": best["rollout"]["seconds"],
            "runs": pairs}


async def main_async(args: argparse.Namespace, model: Path, out: Path) -> dict[str, Any]:
    cfg = job_config(args, model, out)
    use_session_threads(args.sessions)  # as agentr1 train does
    store = TraceStore.open(cfg.db)
    modes = [await one_mode(args, cfg, store, model, out, mode) for mode in args.modes.split(",")]
    return {"bench": "rollout", "job": args.job, "model": args.model, "device": args.device,
            "sessions": args.sessions // args.n * args.n, "n": args.n, "turns": args.turns,
            "tokens_per_call": args.tokens, **{f"ratio_{m['mode']}": m["ratio"] for m in modes},
            **{f"rollout_tokens_per_s_{m['mode']}": m["rollout_tokens_per_s"] for m in modes}, "modes": modes,
            "loadavg_at_start": args.loadavg, "host": platform.node(), "commit": commit()}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def markdown(result: dict[str, Any]) -> str:
    lines = [f"rollout bench: {result['job']}, {result['model']} on {result['device']}, {result['sessions']} sessions "
             f"(load average at start {result['loadavg_at_start']})", "",
             "| run | wall s | engine busy s | ms/forward | forwards | admissions | calls | tokens | tokens/s | ratio | "
             "prefill/call | cached/call | tok/step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    runs = [(f"{m['mode']} {i}", p) for m in result["modes"] for i, p in enumerate(m["runs"])]
    for i, p in runs:
        r, e = p["rollout"], p["engine_only"]
        lines.append(f"| rollout {i} | {r['seconds']} | {r['engine_busy_s']} | {r['ms_per_forward']} | {r['forwards']} | "
                     f"{r['prefill_passes']} | {r['calls']} | "
                     f"{r['tokens']} | {r['tokens_per_s']} | "
                     f"{p['ratio']} | {r['prefill_tokens_per_call']} | {r['cached_tokens_per_call']} | "
                     f"{r['tokens_per_decode_step']} |")
        lines.append(f"| engine only {i} | {e['seconds']} | {e['engine_busy_s']} | {e['ms_per_forward']} | "
                     f"{e['forwards']} | {e['prefill_passes']} | {e['calls']} | {e['tokens']} | {e['tokens_per_s']} | | | | "
                     f"{e['tokens_per_decode_step']} |")
        lines.append(f"| thread CPU s | rollout {r['thread_cpu_s']} engine-only {e['thread_cpu_s']} |||||||||||")
        if "first_call_s" in r:
            lines.append(f"| rollout timeline | sessions opened from {r.get('first_open_s')} s (median "
                         f"{r.get('median_open_s')}, last {r.get('last_open_s')}); calls reached the backend from "
                         f"{r['first_call_s']} s (median "
                         f"{r['median_call_s']}, last {r['last_call_s']}); the last session finished at "
                         f"{r.get('last_finish_s')} s; the rollout ended {r['after_last_answer_s']} s after the last "
                         "answer |||||||||||")
        if "shard_cpu_s" in r:
            lines.append(f"| gateway processes | CPU s each: {r['shard_cpu_s']} (calls timed by the gateway: from a "
                         "handler's start to its step stored) |||||||||||")
        if "loop" in r:
            lp = r["loop"]
            phases = "; ".join(f"{name} {v['wall_s']} s: busy {v['loop_busy']:.0%}, gateway CPU {v['gateway_cpu']:.0%}"
                               for name, v in lp.items() if isinstance(v, dict))
            lines.append(f"| gateway loop | {phases} (an idle loop wakes {lp['idle_lateness_ms']} ms late) |||||||||||")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny (a random 2-layer Llama), smollm2, or a HF directory")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--job", choices=sorted(JOBS), default="chains")
    parser.add_argument("--sessions", type=int, default=32, help="concurrent sessions (tasks x n)")
    parser.add_argument("--n", type=int, default=4, help="samples per task (GRPO group size)")
    parser.add_argument("--turns", type=int, default=4, help="chains: model calls per session (0: as the model goes)")
    parser.add_argument("--tokens", type=int, default=0, help="max tokens per call (0: the job's own, 64)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--profile", action="store_true",
                        help="torch.profiler over the engine-only replay (use with --modes thread), tables printed")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more job overrides, e.g. actor_rollout_ref.rollout.engine.compile=true")
    parser.add_argument("--modes", default="eager,thread,process",
                        help="compared in this order: thread (the engine in the trainer's process), process (in "
                             "its own), eager (in a thread, every arrival admitted at once: the engine before)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads of the process (0: torch's default, all cores; 1 on a shared CPU)")
    parser.add_argument("--pyspy", default=None, help="record the last rollout with py-spy to this file (raw stacks)")
    parser.add_argument("--gil", action="store_true", help="with --pyspy: only samples holding the GIL")
    args = parser.parse_args()
    args.loadavg = round(os.getloadavg()[0], 2)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)  # the engine's worker thread inherits it
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # and an engine process
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        out = Path(tmp)
        if args.model == "tiny":
            from agentr1.core.models import build_tiny_random_model

            model = build_tiny_random_model(out / "tiny")
        else:
            model = resolve_model(args.model)
        result = asyncio.run(main_async(args, model, out))
    print(markdown(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
