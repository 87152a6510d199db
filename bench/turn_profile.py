"""Where the gateway's CPU per call goes, turn 1 versus turn 64 of one conversation.

    .venv/bin/python bench/turn_profile.py                  # 3 measured + 2 profiled conversations, ~1 minute
    .venv/bin/python bench/turn_profile.py --reps 5 --top 30 --model smollm2

The gateway of bench/gateway_server.py (instant backend answering "4", durable SQLite) runs in its
own process, started by this file with ``--serve``; one client grows conversations to 64 turns
(each turn: the whole history plus a new user message, as bench/gateway_bench.py part b).

1. CPU per call (the gateway process's CPU clock, all threads, read by the server when each request
   arrives: the difference between consecutive calls of the sequential client) by turn, over
   ``--reps`` conversations nobody profiles: turn 1, turns 2-8, turns 57-64, turn 64, ratios.
2. Hot spots: ``--profile-reps`` more conversations whose turns 1-8 and 57-64 carry a label
   header. For a labelled request the server runs ``cProfile`` (timer: this thread's CPU time) on
   the event loop thread from the first byte to the last, and on the store writer's thread around
   each commit (``StepWriter._write``, patched in the bench process only). The report ranks
   functions by CPU per call (own time, and cumulative for a few known stages) for early and late
   turns, and lists what grows most from early to late. cProfile slows every Python call, so the
   shares, not the absolute milliseconds of part 2, are the finding (builtins such as isinstance
   and dict.get are inflated most).
3. The stages that grow with the history, timed in this process without a profiler on the
   requests of turns 1, 8 and 64: the real microseconds behind part 2's ranking.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

__all__ = ["main"]

LABEL_HEADER = "x-bench-profile"
CPU_HEADER = "x-bench-cpu-ns"
EARLY, LATE = "turns 1-8", "turns 57-64"


# -- server side (--serve) ------------------------------------------------------------------

class _Profiles:
    """One loop-thread and one writer-thread profiler per label; the label of the request in flight."""

    def __init__(self) -> None:
        self.loop: dict[str, cProfile.Profile] = {}
        self.writer: dict[str, cProfile.Profile] = {}
        self.calls: dict[str, int] = {}
        self.current: str | None = None
        self.lock = threading.Lock()

    def profiler(self, table: dict[str, cProfile.Profile], label: str) -> cProfile.Profile:
        if label not in table:
            table[label] = cProfile.Profile(time.thread_time)
        return table[label]

    def dump(self, folder: Path) -> None:
        for kind, table in (("loop", self.loop), ("writer", self.writer)):
            for label, prof in table.items():
                prof.dump_stats(folder / f"{kind}-{label.replace(' ', '_')}.prof")
        (folder / "calls.txt").write_text("\n".join(f"{k}\t{v}" for k, v in self.calls.items()))


def _profiled_app(app: Any, profiles: _Profiles, folder: Path) -> Any:
    """``app`` with a ``x-bench-cpu-ns`` response header (the process's CPU time when the request
    reached the app: consecutive requests of a sequential client give the CPU of each whole call,
    all threads, in nanoseconds) and the labelled requests profiled."""
    async def wrapper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # uvicorn ends by re-raising SIGTERM: write the profiles at shutdown
            async def send_and_dump(message: dict[str, Any]) -> None:
                if message["type"] == "lifespan.shutdown.complete":
                    profiles.dump(folder)
                await send(message)

            await app(scope, receive, send_and_dump)
            return
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        cpu = str(time.process_time_ns()).encode()

        async def send_with_cpu(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (CPU_HEADER.encode(), cpu)]}
            await send(message)

        label = dict(scope["headers"]).get(LABEL_HEADER.encode(), b"").decode() or None
        if label is None:
            await app(scope, receive, send_with_cpu)
            return
        profiles.current = label
        profiles.calls[label] = profiles.calls.get(label, 0) + 1
        prof = profiles.profiler(profiles.loop, label)
        prof.enable()
        try:
            await app(scope, receive, send_with_cpu)
        finally:
            prof.disable()
            profiles.current = None

    return wrapper


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from agentr1.gateway.server import uvicorn_options
    from agentr1.gateway.writer import StepWriter
    from gateway_server import gateway_app

    profiles = _Profiles()
    original = StepWriter._write

    def profiled_write(self: StepWriter, batch: list[Any]) -> None:
        label = profiles.current
        if label is None:
            return original(self, batch)
        prof = profiles.profiler(profiles.writer, label)
        prof.enable()
        try:
            return original(self, batch)
        finally:
            prof.disable()

    StepWriter._write = profiled_write  # type: ignore[method-assign]
    app, settings = gateway_app("instant", args.model, args.db)
    uvicorn.run(_profiled_app(app, profiles, args.profile_dir), host="127.0.0.1", port=args.port,
                **uvicorn_options(settings))


# -- client side ----------------------------------------------------------------------------

def _conversation(client: httpx.Client, url: str, rep: int, label_of: Any) -> dict[int, float]:
    """One conversation grown to 64 turns; {turn: gateway CPU seconds of that call}."""
    s = client.post(f"{url}/sessions", json={}).json()
    messages = [{"role": "user", "content": f"conversation {rep}: let us talk."}]
    starts: list[int] = []
    for turn in range(1, 65):
        label = label_of(turn)
        headers = {LABEL_HEADER: label} if label else {}
        r = client.post(f"{s['base_url']}/chat/completions", headers=headers,
                        json={"model": "bench", "messages": messages, "max_tokens": 16})
        r.raise_for_status()
        starts.append(int(r.headers[CPU_HEADER]))
        messages += [r.json()["choices"][0]["message"],
                     {"role": "user", "content": f"turn {turn}: tell me a little more please."}]
    starts.append(int(client.get(f"{url}/health").headers[CPU_HEADER]))
    return {turn: (starts[turn] - starts[turn - 1]) / 1e9 for turn in range(1, 65)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _per_call_cpu(per_turn: dict[int, list[float]]) -> list[str]:
    """Mean (the CPU the calls cost, collections of the garbage collector included) and median (robust to
    the machine's other load) per call, by turn."""
    rows = ["| | turn 1 | turns 2-8 | turns 57-64 | turn 64 | turns 57-64 / 2-8 | turn 64 / turn 1 |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for name, stat in (("mean", _mean), ("median", statistics.median)):
        t1, t64 = stat(per_turn[1]), stat(per_turn[64])
        early = stat([v for t in range(2, 9) for v in per_turn[t]])
        late = stat([v for t in range(57, 65) for v in per_turn[t]])
        rows.append(f"| {name} | {t1 * 1000:.2f} ms | {early * 1000:.2f} ms | {late * 1000:.2f} ms | "
                    f"{t64 * 1000:.2f} ms | {late / early:.2f}x | {t64 / t1:.2f}x |")
    return rows


def _stats(folder: Path, kind: str, label: str) -> dict[tuple[str, int, str], tuple[float, float]]:
    """{function: (own seconds, cumulative seconds)} of one profile, {} if it was never made."""
    path = folder / f"{kind}-{label.replace(' ', '_')}.prof"
    if not path.exists():
        return {}
    raw = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    return {func: (tt, ct) for func, (_cc, _nc, tt, ct, _callers) in raw.items()}


def _name(func: tuple[str, int, str]) -> str:
    file, line, name = func
    parts = Path(file).parts
    short = "/".join(parts[-3:]) if "agentr1" not in parts else "/".join(parts[parts.index("agentr1"):])
    return f"{short}:{line}({name})" if line else name


def _hot_spots(folder: Path, top: int) -> list[str]:
    calls = dict(line.split("\t") for line in (folder / "calls.txt").read_text().splitlines())
    lines: list[str] = []
    merged: dict[str, dict[tuple[str, int, str], tuple[float, float]]] = {}
    for label in (EARLY, LATE):
        n = int(calls[label])
        loop, writer = _stats(folder, "loop", label), _stats(folder, "writer", label)
        both = dict(loop)
        for func, (tt, ct) in writer.items():
            old = both.get(func, (0.0, 0.0))
            both[func] = (old[0] + tt, old[1] + ct)
        merged[label] = {f: (tt / n, ct / n) for f, (tt, ct) in both.items()}
        total = sum(tt for tt, _ in merged[label].values())
        writer_total = sum(tt for tt, _ in writer.values()) / n
        lines += [f"\n#### {label}: {total * 1000:.2f} ms profiled CPU per call ({n} calls; "
                  f"writer thread {writer_total * 1000:.2f} ms), top functions by own time\n",
                  "| function | own ms / call | share | cumulative ms / call |", "|---|---:|---:|---:|"]
        for func, (tt, ct) in sorted(merged[label].items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"| `{_name(func)}` | {tt * 1000:.3f} | {tt / total:.1%} | {ct * 1000:.3f} |")
    early, late = merged[EARLY], merged[LATE]
    growth = {f: late.get(f, (0, 0))[0] - early.get(f, (0, 0))[0] for f in set(early) | set(late)}
    cum_growth = {f: late.get(f, (0, 0))[1] - early.get(f, (0, 0))[1] for f in set(early) | set(late)}
    lines += ["\n#### what grows from early to late turns (own time per call)\n",
              "| function | early ms | late ms | + ms per call | late cumulative ms (early) |", "|---|---:|---:|---:|---:|"]
    for func, extra in sorted(growth.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| `{_name(func)}` | {early.get(func, (0, 0))[0] * 1000:.3f} | {late.get(func, (0, 0))[0] * 1000:.3f} "
                     f"| {extra * 1000:+.3f} | {late.get(func, (0, 0))[1] * 1000:.3f} "
                     f"({early.get(func, (0, 0))[1] * 1000:.3f}) |")
    lines += ["\n#### what grows from early to late turns (cumulative time per call, agentr1 functions)\n",
              "| function | early cumulative ms | late cumulative ms | + ms |", "|---|---:|---:|---:|"]
    ours = [f for f in cum_growth if "agentr1" in f[0]]
    for func in sorted(ours, key=lambda f: -cum_growth[f])[:top]:
        lines.append(f"| `{_name(func)}` | {early.get(func, (0, 0))[1] * 1000:.3f} | "
                     f"{late.get(func, (0, 0))[1] * 1000:.3f} | {cum_growth[func] * 1000:+.3f} |")
    return lines


def _stage_row(turn: int, timed: Any) -> str:
    import json

    import orjson

    from agentr1.core.rendering.continuation import _first_difference
    from agentr1.gateway.codecs.chat_body import MessagePrefixes, validate_chat_body
    from agentr1.gateway.schemas import ChatCompletionRequest
    from agentr1.store import jsonio
    from agentr1.store.blobs import _has_inline

    messages = [{"role": "user", "content": "conversation 0: let us talk."}]
    for t in range(1, turn):
        messages += [{"role": "assistant", "content": "4", "refusal": None},
                     {"role": "user", "content": f"turn {t}: tell me a little more please."}]
    body = {"model": "bench", "messages": messages, "max_tokens": 16}
    raw = json.dumps(body)
    _, valid = validate_chat_body(body, MessagePrefixes(), None)
    previous = valid[:-1]
    prefixes = MessagePrefixes()
    earlier = json.loads(json.dumps(messages[:-2]))  # the session's previous request, as parsed then (equal dicts)

    def incremental() -> Any:
        prefixes.remember("s", earlier, valid[:len(earlier)])
        return validate_chat_body(body, prefixes, "s")

    def whole() -> Any:
        request = ChatCompletionRequest.model_validate(body)
        return request.model_dump(include={"messages"}, exclude_none=True)["messages"]

    costs = [timed(lambda: json.loads(raw)), timed(lambda: orjson.loads(raw)), timed(whole),
             timed(incremental),
             timed(lambda: _first_difference(previous, valid)),
             timed(lambda: _has_inline(valid)),
             timed(lambda: (json.dumps(valid), json.dumps(valid))),
             timed(lambda: (jsonio.dumps(valid), jsonio.dumps(valid)))]
    return f"| {turn} ({len(messages)}) | " + " | ".join(f"{c:.0f} us" for c in costs) + " |"


def _stage_costs(repeat: int = 300) -> list[str]:
    """CPU of the stages that grow with the history, timed in this process without a profiler, on
    the request of turn 1, 8 and 64 of the conversation above (the assistant says "4"): the stage
    before the hot-path work of issue 20 phase 3 and the one that replaced it, side by side."""
    def timed(fn: Any) -> float:
        fn()
        started = time.process_time()
        for _ in range(repeat):
            fn()
        return (time.process_time() - started) / repeat * 1e6

    rows = ["| turn (messages) | body: json.loads (before) | body: orjson.loads (now) | whole validation + model_dump "
            "(before) | validate_chat_body, the session's last request known (now) | prefix comparison "
            "(_first_difference) | inline-image scan (one list) | store JSON sent + seen: json.dumps (before) | "
            "store JSON sent + seen: jsonio.dumps (now) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for turn in (1, 8, 64):
        rows.append(_stage_row(turn, timed))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny or smollm2: the same tokenizer and template")
    parser.add_argument("--reps", type=int, default=3, help="conversations measured without the profiler")
    parser.add_argument("--profile-reps", type=int, default=2, help="conversations whose early/late turns are profiled")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--no-stages", action="store_true", help="skip part 3 (e.g. against an older tree)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--profile-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.serve:
        serve(args)
        return
    from agentr1.gateway.server import free_port

    tmp = Path(f"/tmp/agentr1-turn-profile-{os.getpid()}")
    tmp.mkdir(parents=True)
    port = free_port()
    cmd = [sys.executable, __file__, "--serve", "--model", args.model, "--db", f"sqlite:///{tmp / 'turns.db'}",
           "--port", str(port), "--profile-dir", str(tmp)]
    server = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the profiled gateway did not start")
            time.sleep(0.2)
        per_turn: dict[int, list[float]] = {}
        load = [os.getloadavg()[0]]
        with httpx.Client(timeout=60) as client:
            _conversation(client, url, -1, lambda t: None)  # warm-up
            for rep in range(args.reps):
                for turn, cpu in _conversation(client, url, rep, lambda t: None).items():
                    per_turn.setdefault(turn, []).append(cpu)
            for rep in range(args.profile_reps):
                _conversation(client, url, 1000 + rep, lambda t: EARLY if t <= 8 else LATE if t >= 57 else None)
        load.append(os.getloadavg()[0])
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"\n### CPU per call by turn (gateway process, mean of {args.reps} conversations, load average "
          f"{load[0]:.1f} -> {load[1]:.1f})\n")
    print("\n".join(_per_call_cpu(per_turn)))
    if args.profile_reps:
        print(f"\n### Hot spots (cProfile, thread CPU time, {args.profile_reps} conversations)")
        print("\n".join(_hot_spots(tmp, args.top)))
    if not args.no_stages:
        print("\n### Stages that grow with the history, timed without a profiler (CPU per call)\n")
        print("\n".join(_stage_costs()))
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
