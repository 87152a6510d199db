"""The gateway's CPU per call and client p50 on the peer benchmark's prompt, a git revision against the
working tree, in alternating rounds of one run.

    .venv/bin/python bench/gateway_ab.py --before ef35b49 --rounds 8 --calls 200

Both trees run as ``agentr1 gateway --backend vllm`` (durable SQLite) in front of one instant backend
(bench/instant_vllm.py), as bench/peer_bench.py runs agentr1; the ``--before`` tree is a ``git archive`` of
that revision put first on ``PYTHONPATH`` (its ``src`` folder), the other is the working tree. Each round
sends ``--calls`` sequential calls of the 11-message peer prompt to each gateway, the order flipped from
round to round, and reads the gateway process's CPU time (psutil, user + system). Printed per tree: CPU ms
per call of every round and their median, and the client's p50 per round. The ratio of the medians is the
result; absolute numbers follow the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_bench import conversation, free_port, start_backend
from peers import AgentR1, start_process, wait_ready

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["sdk", "core", "gateway", "viewer", "trainer", "adapters", "store", "cli", "envs"]  # before src/ (2026-12-05)


def package_folders(root: Path) -> list[Path]:
    """The folders to put on ``PYTHONPATH`` for the tree at ``root``: ``src`` or, for older revisions, one per part."""
    return [root / "src"] if (root / "src" / "agentr1").is_dir() else [root / p for p in PACKAGES]


class TreeGateway(AgentR1):
    """agentr1's gateway run from the packages under ``root``."""

    def __init__(self, port: int, backend_url: str, tmp: Path, root: Path, label: str) -> None:
        super().__init__(port, backend_url, tmp)
        self.root, self.label = root, label

    def start(self) -> None:
        self.db = f"sqlite:///{self.tmp / (self.label + '.db')}"
        cmd = [str(Path(sys.executable).parent / "agentr1"), "gateway", "--backend", "vllm", "--backend-url",
               self.backend_url, "--model", "smollm2", "--db", self.db, "--port", str(self.port),
               "--accept-any-model", "--log-level", "warning"]
        env = {"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(str(p) for p in package_folders(self.root))}
        self.proc = start_process(cmd, cwd=self.tmp, log=self.tmp / f"{self.label}.log", env=env)
        wait_ready(f"{self.url}/ready", self.proc)


async def one_round(gateway: TreeGateway, calls: int) -> tuple[float, float]:
    """(gateway CPU ms per call, client p50 ms) of ``calls`` sequential calls in a new session."""
    proc = psutil.Process(gateway.pid)
    async with httpx.AsyncClient(timeout=60) as client:
        base = await gateway.open_session(client, "ab")
        latencies = []
        cpu_before = sum(proc.cpu_times()[:2])
        for i in range(calls):
            started = time.perf_counter()
            r = await client.post(f"{base}/chat/completions",
                                  json={"model": "bench", "messages": conversation(f"ab {i}", i), "max_tokens": 32})
            latencies.append((time.perf_counter() - started) * 1000)
            r.raise_for_status()
        cpu = (sum(proc.cpu_times()[:2]) - cpu_before) * 1000 / calls
    return cpu, sorted(latencies)[calls // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200, help="sequential calls per round and tree")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="agentr1-gateway-ab-"))
    before_root = tmp / "before"
    before_root.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], check=True, capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", str(before_root)], input=archive, check=True)
    backend_url, backend = start_backend(tmp)
    trees = [TreeGateway(free_port(), backend_url, tmp, before_root, "before"),
             TreeGateway(free_port(), backend_url, tmp, ROOT, "after")]
    results: dict[str, list[tuple[float, float]]] = {t.label: [] for t in trees}
    try:
        for tree in trees:
            tree.start()
            asyncio.run(one_round(tree, 50))  # warm-up
        for k in range(args.rounds):
            for tree in trees if k % 2 == 0 else trees[::-1]:
                results[tree.label].append(asyncio.run(one_round(tree, args.calls)))
    finally:
        for tree in trees:
            tree.stop()
        backend.terminate()
    medians = {}
    for label, rounds in results.items():
        cpus = sorted(c for c, _ in rounds)
        medians[label] = cpus[len(cpus) // 2]
        print(f"{label:6s} CPU ms per call by round {[round(c, 2) for c in cpus]}, median {medians[label]:.2f}; "
              f"client p50 ms by round {sorted(round(p, 2) for _, p in rounds)}")
    print(f"after / before CPU per call: {medians['after'] / medians['before']:.2f}x; "
          f"load average {os.getloadavg()}; before = {args.before}")


if __name__ == "__main__":
    main()
