"""The glibc mmap threshold is pinned before a policy starts training (policy/memory.py)."""

from __future__ import annotations

import subprocess
import sys

CHECK = ("import os; from agentr1.trainer.policy import memory; "
         "print(memory.pin_mmap_threshold(), memory.pin_mmap_threshold())")


def _run(env_extra: dict[str, str]) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"} | env_extra
    return subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_pinned_once_on_linux_and_a_users_choice_is_kept():
    assert _run({}) == ("True True" if sys.platform.startswith("linux") else "False False")
    assert _run({"MALLOC_MMAP_THRESHOLD_": "65536"}) == "False False"


# under jemalloc: 512 MiB written and freed (kept by jemalloc), then an update phase that reports how much lay freed
# when it started, and how much is kept once it has freed 256 MiB of its own and ended
PHASE_PROBE = """
import ctypes, json
from agentr1.core.allocator import _freed_bytes, _mallctl, malloc_in_use, preload_jemalloc
preload_jemalloc()
from agentr1.trainer.policy.updates import update_phase
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def churn(size):
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
churn(512 << 20)
left = _freed_bytes(_mallctl())
@update_phase
def update():
    at_start = _freed_bytes(_mallctl())
    churn(256 << 20)
    return at_start
at_start = update()
print(json.dumps({"malloc": malloc_in_use(), "left_before": left, "at_start": at_start,
                  "after": _freed_bytes(_mallctl())}))
"""


def test_an_update_phase_starts_and_ends_with_no_freed_memory_kept():
    """What earlier work left freed must not sit beside the update's own peak, nor what the update freed beside the
    next rollout's (the demo's 6 GiB bound)."""
    import json
    import os

    import pytest

    from agentr1.core.allocator import jemalloc_library

    if jemalloc_library() is None:
        pytest.skip("no system jemalloc (libjemalloc2): the phase's purge applies only under jemalloc")
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTR1_MALLOC", "LD_PRELOAD", "AGENTR1_MALLOC_PRELOADED",
                                                            "MALLOC_CONF")}
    done = subprocess.run([sys.executable, "-c", PHASE_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["malloc"] == "jemalloc"
    assert got["left_before"] >= 500 << 20  # jemalloc kept the 512 MiB...
    assert got["at_start"] < 16 << 20, got  # ...and the phase gave it back before it began
    assert got["after"] < 16 << 20, got  # and its own 256 MiB went back when it ended
