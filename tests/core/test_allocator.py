"""keep_freed_memory: glibc keeps freed heap memory in the process (fewer page faults on a reused 2 MiB block under
the demo's fixed 4 MiB mmap threshold), its children inherit the settings, the user's own MALLOC_*_ values and
AGENTR1_MALLOC=default are respected."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agentr1.core import MALLOC_SETTINGS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")

# 20 rounds of malloc -> write every page -> free of one 2 MiB block from the top of the heap; prints the minor page faults of those
# rounds and what a child process sees in its environment
PROBE = """
import ctypes, json, os, resource, subprocess, sys
from agentr1.core import keep_freed_memory
applied = keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 2 << 20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
child = subprocess.run([sys.executable, "-c", "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('MALLOC_')}))"],
                       capture_output=True, text=True, check=True).stdout
print(json.dumps({"applied": applied, "faults": faults, "child": json.loads(child)}))
"""


def probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "AGENTR1_MALLOC"}
    clean["MALLOC_MMAP_THRESHOLD_"] = str(4 << 20)  # fixed, as the demo's stages run (examples/chains/demo.py)
    done = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_freed_memory_is_reused_and_children_inherit_the_settings():
    kept, default = probe(), probe(AGENTR1_MALLOC="default")
    pages = (2 << 20) // 4096
    assert default["applied"] == {} and set(default["child"]) == {"MALLOC_MMAP_THRESHOLD_"}
    assert default["faults"] > 10 * pages  # each round a fresh mapping, faulted in page by page
    assert set(kept["applied"]) == set(MALLOC_SETTINGS)
    assert kept["faults"] < 3 * pages, kept  # the first round only
    assert kept["child"] == {"MALLOC_MMAP_THRESHOLD_": str(4 << 20),
                             **{name: str(value) for name, (_, value) in MALLOC_SETTINGS.items()}}


def test_the_users_own_malloc_settings_win():
    mine = probe(MALLOC_TOP_PAD_="131072")
    assert set(mine["applied"]) == set(MALLOC_SETTINGS) - {"MALLOC_TOP_PAD_"}
    assert mine["child"]["MALLOC_TOP_PAD_"] == "131072"
