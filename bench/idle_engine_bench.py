"""Parallel CPU work beside an idle embedded engine: this tree's engine against an earlier commit's, in one run.

In the trainer the engine sits idle while the update runs in another thread; any user code that runs parallel torch
work beside an engine (a reward model, an evaluation) meets the same case. An OpenMP pool left idle in the engine's
worker makes libgomp manage more threads than CPUs and sleep/wake the busy thread's workers on every parallel region
(``agentr1.core.openmp``). Each side runs in a process of its own: it starts the engine on SmolLM2 (``LocalBackend``,
as a Python user does), generates 8 tokens, waits until the engine is idle, ends the calling thread's own pool,
then times ``--products`` decode-shaped products (16 x 576 -> 1,536, 2 OpenMP threads) on a new thread, best of 3.
``--before COMMIT`` takes that commit's ``src/`` from git; the sides alternate ``--repeat`` times.

    .venv/bin/python bench/idle_engine_bench.py --before bbeec78 [--repeat 2] [--products 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import asyncio, json, sys, threading, time
import torch
from agentr1.core import release_openmp_threads
from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.core.models import resolve_model
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend
sys.path.insert(0, sys.argv[2])
from openmp_pools_bench import decode_loop
torch.set_num_threads(2)
backend = LocalBackend(resolve_model("smollm2"), EngineOptions(max_batch_size=16))
backend.engine.start()
request = GenerateRequest(prompt_ids=[1, 2, 3, 4, 5], sampling=SamplingParams(max_new_tokens=8, seed=0))
asyncio.run(backend.generate(request))
while not backend.engine.idle():
    time.sleep(0.05)
time.sleep(0.3)
release_openmp_threads()  # the loading thread's own pool is not what is measured here
runs = []
def work():
    decode_loop(300)
    runs.extend(decode_loop(int(sys.argv[1])) for _ in range(3))
thread = threading.Thread(target=work)
thread.start()
thread.join()
print(json.dumps(min(runs, key=lambda r: r["wall_s"])))
"""


def probe(src: Path, products: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE, str(products), str(ROOT / "bench")], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"the probe failed on {src}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def source_of(commit: str, folder: Path) -> Path:
    """``commit``'s ``src/`` exported into ``folder``."""
    archive = subprocess.run(["git", "archive", commit, "src"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the commit whose engine is the baseline")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--products", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sides = {f"engine @ {args.before}": source_of(args.before, Path(folder)), "engine (this tree)": ROOT / "src"}
        results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for _ in range(args.repeat):
            for name, src in sides.items():
                results[name].append(probe(src, args.products))
    print(f"{args.products} products of 16 x 576 -> 1,536 on 2 threads in a thread beside an idle engine (best of 3 "
          "per run)\n")
    print("| beside | wall s (run by run) | user s | system s | context switches |\n|---|---|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {' / '.join(str(r['wall_s']) for r in runs)} | "
              f"{' / '.join(str(r['user_s']) for r in runs)} | {' / '.join(str(r['sys_s']) for r in runs)} | "
              f"{' / '.join(str(r['context_switches']) for r in runs)} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
