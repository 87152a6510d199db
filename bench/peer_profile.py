"""Where agentr1's gateway spends its CPU in the peer benchmark's setting, and what its backend hop
costs with another HTTP client.

    .venv/bin/python bench/peer_profile.py                 # ~1 minute; py-spy from the peers' venv
    .venv/bin/python bench/peer_profile.py --py-spy /path/to/py-spy --calls 600

1. ``agentr1 gateway --backend vllm`` in front of bench/instant_vllm.py (as bench/peer_bench.py runs
   it), ``--calls`` sequential calls of the peer benchmark's 11-message prompt, sampled by py-spy with
   ``--gil`` (only samples where a thread holds the GIL: the gateway's Python CPU, not its waits).
   Printed: the share of samples in which each of a few stages is on the stack (stages nest: the
   backend hop is inside the route handler).
2. The backend hop alone: CPU per call of the client process posting the same token-id
   ``/v1/completions`` body (300 prompt ids, 32 new tokens) with ``httpx.AsyncClient`` (what the
   gateway uses) and with ``aiohttp.ClientSession``, alternating, sequential.

py-spy: ``pip install py-spy`` (a binary wheel); it needs ptrace permission on the gateway process.
``KEEP_PROFILE=1`` keeps the working folder (``/tmp/agentr1-peer-profile-<pid>``, the raw samples in
``spy.txt``) for other cuts of the profile.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentr1.gateway.server import free_port
from peer_bench import run_phase, start_backend
from peers import AgentR1

__all__ = ["STAGES", "main"]

# (label, a substring of a py-spy frame "function (file:line)") in the order they nest
STAGES = [
    ("uvicorn: HTTP parsing and writing (h11)", "H11Protocol."),
    ("the ASGI app (middleware, routing, the route)", "RequestResponseCycle.run_asgi"),
    ("route handler: chat_completions", "chat_completions (gateway/routes/openai.py"),
    ("prepare: session, context policy, prompt plan", "ModelCall.prepare"),
    ("render + tokenise the prompt", "TextRenderer.render"),
    ("backend hop: httpx AsyncClient.post to /v1/completions", "AsyncClient.post (httpx"),
    ("decode + parse the sampled ids, the answer", "ModelCall.run ("),
    ("JSON encode (json.dumps)", "dumps (json/__init__"),
    ("JSON decode (json.loads)", "loads (json/__init__"),
    ("pydantic validation", "validate_python"),
    ("the step writer (its GIL-holding part)", "StepWriter._write"),
]


def spy_stages(samples_file: Path) -> list[str]:
    total, per_stage = 0, collections.Counter()
    for line in samples_file.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for label, marker in STAGES:
            if marker in stack:
                per_stage[label] += int(count)
    rows = [f"{total} samples with the GIL held", "", "| stage (on the stack) | share of the gateway's Python CPU |",
            "|---|---:|"]
    rows += [f"| {label} | {per_stage[label] / total:.1%} |" for label, _ in STAGES]
    return rows


def spy_leaves(samples_file: Path, top: int = 25) -> list[str]:
    """The ``top`` functions most often at the top of the stack (self time), by share of the samples."""
    total, leaves = 0, collections.Counter()
    for line in samples_file.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        leaves[stack.rsplit(";", 1)[-1]] += int(count)
    rows = ["", "| function (self) | share |", "|---|---:|"]
    rows += [f"| {name} | {n / total:.1%} |" for name, n in leaves.most_common(top)]
    return rows


async def _client_cpu(url: str, kind: str, calls: int) -> float:
    import aiohttp
    import httpx

    body = {"model": "bench", "prompt": list(range(1000, 1300)), "max_tokens": 32, "temperature": 1.0, "top_p": 1.0,
            "top_k": -1, "logprobs": 0, "return_tokens_as_token_ids": True, "return_token_ids": True, "stream": False}
    target = f"{url}/v1/completions"
    if kind == "httpx":
        async with httpx.AsyncClient(timeout=60) as client:
            async def post() -> None:
                (await client.post(target, json=body)).json()
            return await _timed(post, calls)
    async with aiohttp.ClientSession() as session:
        async def post() -> None:
            async with session.post(target, json=body) as r:
                await r.json()
        return await _timed(post, calls)


async def _timed(post, calls: int) -> float:
    for _ in range(20):
        await post()
    started = time.process_time()
    for _ in range(calls):
        await post()
    return (time.process_time() - started) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--py-spy", type=Path, default=Path.home() / ".cache" / "agentr1-peers" / "bin" / "py-spy")
    parser.add_argument("--calls", type=int, default=600, help="sequential calls sampled (sessions of 20)")
    parser.add_argument("--client-calls", type=int, default=600)
    parser.add_argument("--sessions", type=int, default=1,
                        help="concurrent sessions of the sampled calls (1: sequential; 64: the peer bench's concurrent phase)")
    parser.add_argument("--top", type=int, default=0, help="also list the N functions with the most self time")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tmp = Path(f"/tmp/agentr1-peer-profile-{os.getpid()}")
    tmp.mkdir(parents=True)
    backend_url, backend = start_backend(tmp)
    gateway = AgentR1(free_port(), backend_url, tmp)
    try:
        gateway.start()
        asyncio.run(run_phase(gateway, sessions=1, calls=5, max_tokens=32, tag="warmup", concurrent=False))
        samples = tmp / "spy.txt"
        spy = None
        if args.py_spy.exists():
            spy = subprocess.Popen([str(args.py_spy), "record", "--pid", str(gateway.pid), "--rate", "500", "--gil",
                                    "--format", "raw", "-o", str(samples)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            time.sleep(2)
        concurrent = args.sessions > 1
        result = asyncio.run(run_phase(gateway, sessions=args.sessions if concurrent else max(1, args.calls // 20),
                                       calls=max(1, args.calls // args.sessions) if concurrent else 20, max_tokens=32,
                                       tag="spy", concurrent=concurrent))
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its samples on Ctrl-C
            spy.wait(timeout=120)
        summary = result.summary()
        print(f"\n### agentr1 gateway, {summary['answered']} calls from {args.sessions} session(s) at once: p50 {summary['p50_ms']} ms, "
              f"CPU {summary['cpu_ms_per_call']} ms per call (psutil); load average {os.getloadavg()[0]:.1f}\n")
        print("\n".join(spy_stages(samples)) if samples.exists() else f"(no py-spy at {args.py_spy})")
        if args.top and samples.exists():
            print("\n".join(spy_leaves(samples, args.top)))
        gateway.stop()
        print("\n### The backend hop alone: client CPU per call, sequential\n")
        print("| client | CPU ms per call, run 1 | run 2 |\n|---|---:|---:|")
        cpu = {kind: [asyncio.run(_client_cpu(backend_url, kind, args.client_calls)) for _ in range(2)]
               for kind in ("httpx", "aiohttp")}
        for kind, (a, b) in cpu.items():
            print(f"| {kind} | {a:.2f} | {b:.2f} |")
    finally:
        gateway.stop()
        backend.terminate()
        backend.wait(timeout=30)
        if not os.environ.get("KEEP_PROFILE"):
            subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
