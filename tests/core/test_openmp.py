"""release_openmp_threads ends the calling thread's OpenMP workers (and only its own), so the engine's thread stops
sharing the CPUs with idle pools that make libgomp sleep and wake its workers on every parallel product."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task is Linux's")

# a thread runs one parallel product on 2 OpenMP threads (its pool: one worker thread), then releases its workers
# (or not); another thread's pool stays; prints the process's thread count at each point
PROBE = """
import json, os, sys, threading, time
import torch
from agentr1.core.openmp import release_openmp_threads
torch.set_num_threads(2)
release = sys.argv[1] == "release"
def threads():
    time.sleep(0.2)
    return len(os.listdir("/proc/self/task"))
counts = {}
def other():
    torch.mm(torch.randn(256, 256), torch.randn(256, 256))
    done.set(); stop.wait()
done, stop = threading.Event(), threading.Event()
keeper = threading.Thread(target=other); keeper.start(); done.wait()
def update():
    counts["before"] = threads()
    torch.mm(torch.randn(512, 512), torch.randn(512, 512))
    counts["with_pool"] = threads()
    counts["released"] = release_openmp_threads() if release else None
    counts["after"] = threads()
worker = threading.Thread(target=update); worker.start(); worker.join()
counts["keeper_left"] = threads(); stop.set(); keeper.join()
print(json.dumps(counts))
"""


def _counts(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_thread_ends_its_own_openmp_workers_and_no_others():
    kept, released = _counts("keep"), _counts("release")
    assert kept["with_pool"] == kept["before"] + 1 == kept["after"]  # a 2-thread pool: one worker, kept idle
    assert released["released"] is True and released["with_pool"] == released["before"] + 1
    assert released["after"] == released["before"]  # its worker ended...
    # ...and the other thread's is still there: once the releasing thread has returned, one thread less than before
    assert released["keeper_left"] == released["before"] - 1


EXECUTOR_PROBE = """
import asyncio, json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
import torch
from agentr1.core.openmp import OpenMPReleasingExecutor
torch.set_num_threads(2)
def threads():
    time.sleep(0.2)
    return len(os.listdir("/proc/self/task"))
async def main():
    pool = OpenMPReleasingExecutor(max_workers=3) if sys.argv[1] == "releasing" else ThreadPoolExecutor(max_workers=3)
    asyncio.get_running_loop().set_default_executor(pool)
    await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.3) for _ in range(3)))  # the 3 worker threads exist
    before = threads()
    products = [asyncio.to_thread(torch.mm, torch.randn(512, 512), torch.randn(512, 512)) for _ in range(6)]
    await asyncio.gather(*products)
    return {"before": before, "after": threads()}
print(json.dumps(asyncio.run(main())))
"""


def test_the_releasing_executor_leaves_its_threads_without_openmp_pools():
    def counts(kind: str) -> dict:
        done = subprocess.run([sys.executable, "-c", EXECUTOR_PROBE, kind], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    plain, releasing = counts("plain"), counts("releasing")
    assert plain["after"] > plain["before"]  # each worker thread that ran a product keeps a pool (1 worker each)
    assert releasing["after"] == releasing["before"]
