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
from agentr1.core.allocator import TORCH_HUGE_PAGES, transparent_huge_pages

HUGE_PAGES = transparent_huge_pages() in ("always", "madvise")  # the kernel offers them to an madvise

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
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("AGENTR1_MALLOC", TORCH_HUGE_PAGES)}
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
    assert set(kept["applied"]) == set(MALLOC_SETTINGS) | ({TORCH_HUGE_PAGES} if HUGE_PAGES else set())
    assert kept["faults"] < 3 * pages, kept  # the first round only
    assert kept["child"] == {"MALLOC_MMAP_THRESHOLD_": str(4 << 20),
                             **{name: str(value) for name, (_, value) in MALLOC_SETTINGS.items()}}


def test_the_users_own_malloc_settings_win():
    mine = probe(MALLOC_TOP_PAD_="131072")
    assert set(mine["applied"]) - {TORCH_HUGE_PAGES} == set(MALLOC_SETTINGS) - {"MALLOC_TOP_PAD_"}
    assert mine["child"]["MALLOC_TOP_PAD_"] == "131072"
    assert TORCH_HUGE_PAGES not in probe(THP_MEM_ALLOC_ENABLE="0")["applied"]


# keep_freed_memory before torch's first allocation, then 20 rounds of a 64 MiB tensor filled and dropped (over the
# 4 MiB mmap threshold: a fresh mapping each round): the rounds' minor faults and the huge pages of the last tensor
TORCH_PROBE = """
import json, resource
from agentr1.core import keep_freed_memory
applied = keep_freed_memory()
import torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = torch.empty(16 << 20, dtype=torch.float32).fill_(1.0)
    huge_kib = next(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages"))
    del block
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"applied": applied, "faults": faults, "huge_kib": huge_kib}))
"""


@pytest.mark.skipif(not HUGE_PAGES, reason="the kernel has no transparent huge pages for an madvise: nothing to ask")
def test_on_glibc_torch_tensors_fault_in_huge_pages_not_4k_ones():
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("AGENTR1_MALLOC", "LD_PRELOAD", TORCH_HUGE_PAGES)}
    clean["MALLOC_MMAP_THRESHOLD_"] = str(4 << 20)

    def run(mode: str) -> dict:
        done = subprocess.run([sys.executable, "-c", TORCH_PROBE], env={**clean, "AGENTR1_MALLOC": mode},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    pages = (64 << 20) // 4096
    huge, plain = run("glibc"), run("default")
    assert plain["applied"] == {} and plain["faults"] > 15 * pages and plain["huge_kib"] == 0, plain
    assert huge["applied"][TORCH_HUGE_PAGES] == 1 and huge["huge_kib"] >= 32 << 10, huge
    assert huge["faults"] < pages, huge  # at most a few 4 KiB pages at each mapping's unaligned ends


# preload_jemalloc re-executes `python -c` with jemalloc where the system has it; then 20 rounds of malloc -> write
# every page -> free of one 64 MiB block (over glibc's 4 MiB mmap threshold: a fresh mapping each round there), and
# how much resident memory release_freed_memory gives back after the last free
JEMALLOC_PROBE = """
import ctypes, json, os, resource
from agentr1.core.allocator import malloc_in_use, preload_jemalloc, release_freed_memory
preload_jemalloc()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 64 << 20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
from agentr1.core.allocator import process_memory
freed_kept_gb = process_memory().get("freed_kept_gb")
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
kept = rss_mib()
under_the_limit = release_freed_memory(keep_bytes=size + (16 << 20))  # 64 MiB freed: within the limit, kept
released = release_freed_memory(keep_bytes=size // 2)
print(json.dumps({"malloc": malloc_in_use(), "faults": faults, "released": released, "kept": not under_the_limit,
                  "rss_drop_mib": kept - rss_mib(), "freed_kept_gb": freed_kept_gb}))
"""


def test_preloaded_jemalloc_reuses_a_large_freed_block_that_glibc_faults_in_every_time():
    from agentr1.core.allocator import jemalloc_library

    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("AGENTR1_MALLOC", "LD_PRELOAD", "AGENTR1_MALLOC_PRELOADED")}
    clean["MALLOC_MMAP_THRESHOLD_"] = str(4 << 20)

    def run(**env: str) -> dict:
        done = subprocess.run([sys.executable, "-c", JEMALLOC_PROBE], env={**clean, **env}, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    pages = (64 << 20) // 4096
    glibc = run(AGENTR1_MALLOC="glibc")
    assert glibc["malloc"] == "glibc" and glibc["faults"] > 15 * pages and glibc["released"] is False
    assert glibc["freed_kept_gb"] is None  # process_memory reports it only under jemalloc
    chosen = run()
    if jemalloc_library() is None:
        assert chosen["malloc"] == "glibc"
    else:  # faulted in once, kept while freed, given back on request
        assert chosen["malloc"] == "jemalloc" and chosen["faults"] < 2 * pages, chosen
        assert chosen["kept"] is True and chosen["released"] is True and chosen["rss_drop_mib"] >= 60, chosen
        assert chosen["freed_kept_gb"] >= 60 / 1024, chosen  # the 64 MiB block, freed and kept


def test_process_memory_reports_the_high_water_mark_that_a_large_block_raised():
    from agentr1.core.allocator import process_memory

    before = process_memory()
    block = bytearray(b"\x01") * (256 << 20)  # every page written
    during = process_memory()
    del block
    after = process_memory()
    assert during["rss_gb"] >= before["rss_gb"] + 0.24 and during["peak_gb"] >= during["rss_gb"]
    assert after["peak_gb"] >= before["rss_gb"] + 0.24 and after["rss_gb"] <= during["rss_gb"]
