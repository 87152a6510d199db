"""The engine leaves no idle OpenMP pool behind: not the one loading the model started on the caller's thread, not
its worker's once the batch is empty. An idle pool beside a busy one makes libgomp sleep and wake the busy pool's
threads on every parallel product (``agentr1/core/openmp.py``): the engine decoded 16 sessions at 127-135 tokens/s
with the loading thread's pool alive and 187-206 without it (docs/benchmarks.md row 46)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task is Linux's")

# a real engine on the tiny model, its worker on N threads: the process's thread count once it is started, after
# the calling thread's own release (which ends nothing if start() already did), and idle after a generation
PROBE = """
import asyncio, json, os, sys, time
import torch
from agentr1.core import release_openmp_threads
from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend
torch.set_num_threads(2)
def threads():
    time.sleep(0.3)
    return len(os.listdir("/proc/self/task"))
def idle_threads(engine):
    while not engine.idle():
        time.sleep(0.05)
    return threads()
backend = LocalBackend(sys.argv[1], EngineOptions(device="cpu", dtype="float32", threads=int(sys.argv[2])))
backend.engine.start()
counts = {"started": idle_threads(backend.engine)}
counts["caller_released"] = release_openmp_threads()
counts["after_caller_release"] = threads()
async def generate():
    request = GenerateRequest(prompt_ids=[1, 2, 3, 4], sampling=SamplingParams(max_new_tokens=16, seed=0))
    return await backend.generate(request)
counts["generated"] = len(asyncio.run(generate()).output_ids)
counts["idle_after_generating"] = idle_threads(backend.engine)
print(json.dumps(counts))
"""


def _counts(model: str, threads: int) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, model, str(threads)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_idle_engine_keeps_no_openmp_pool(tiny_model_path):
    one, two = _counts(str(tiny_model_path), 1), _counts(str(tiny_model_path), 2)
    assert two["generated"] == 16
    # a worker on 2 threads has a pool of one more thread while it works; idle, it has as many threads as on 1
    assert two["started"] == one["started"]
    assert two["idle_after_generating"] == one["idle_after_generating"] == two["started"]
    # the caller's pool (the model was loaded on its thread, with 2 threads) was already ended by start()
    assert two["after_caller_release"] == two["started"]
