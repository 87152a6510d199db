"""Page faults and system time of the policy update under each allocator (agentr1.core.allocator).

Each allocator setting runs in its own process (the allocator is chosen at process start): ``--updates``
GRPO updates (bfloat16 where the CPU multiplies it in hardware, else float32, as the laptop demo chooses) of :class:`~agentr1.trainer.policy.LocalPolicy` on the laptop demo's batch shape
(``bench/update_bench.py``'s rows), one after another. Per update: minor page faults, user and system seconds of the
whole process, wall seconds, resident memory after it; then the process's peak. Settings:

- ``glibc``: ``AGENTR1_MALLOC=glibc`` with the demo stages' 4 MiB mmap threshold and ``keep_freed_memory`` (the
  way the demo ran before);
- ``jemalloc``: the system's jemalloc preloaded the way the ``agentr1`` command does it (``preload_jemalloc``);
- ``glibc-thp``, ``jemalloc-thp``: the same with torch's ``THP_MEM_ALLOC_ENABLE=1`` (its CPU tensors of 2 MiB and
  more aligned to 2 MiB and ``madvise(MADV_HUGEPAGE)``: a fault per 2 MiB instead of per 4 KiB where the kernel's
  transparent huge pages are ``madvise`` or ``always``).

    .venv/bin/python bench/update_memory_bench.py [--updates 4] [--settings glibc jemalloc]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

GLIBC = {"AGENTR1_MALLOC": "glibc", "MALLOC_MMAP_THRESHOLD_": str(4 << 20)}
THP = {"THP_MEM_ALLOC_ENABLE": "1"}  # torch's CPU allocator: blocks of 2 MiB and more aligned and madvised huge
SETTINGS = {"glibc": GLIBC, "jemalloc": {}, "glibc-thp": {**GLIBC, **THP}, "jemalloc-thp": THP}


def run_updates(updates: int, param_dtype: str) -> dict[str, object]:
    """In this process: the updates, measured one by one."""
    from agentr1.core.allocator import keep_freed_memory, malloc_in_use, preload_jemalloc

    preload_jemalloc()  # re-executes this process once where it applies
    keep_freed_memory()  # and glibc's settings, as the `agentr1` command applies both
    sys.path.insert(0, str(Path(__file__).parent))
    from agentr1.core import resolve_model
    from agentr1.trainer.policy import LocalPolicy
    from update_bench import BASE, demo_rows

    policy = LocalPolicy(resolve_model("smollm2"), **{**BASE, "param_dtype": param_dtype})
    rows = demo_rows(2, 4, 258)
    measured = []
    for _ in range(updates):
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        policy.update(rows)
        after = resource.getrusage(resource.RUSAGE_SELF)
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        measured.append({"faults": after.ru_minflt - before.ru_minflt,
                         "user_s": round(after.ru_utime - before.ru_utime, 2),
                         "sys_s": round(after.ru_stime - before.ru_stime, 2),
                         "wall_s": round(time.perf_counter() - started, 2), "rss_gib": round(rss / 2**30, 2)})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {"malloc": malloc_in_use(), "updates": measured, "peak_gib": round(peak, 2),
            "huge_pages_gib": round(_anon_huge_kib() / 2**20, 2)}


def _anon_huge_kib() -> int:
    """Transparent huge pages this process holds now (``AnonHugePages`` of /proc/self/smaps_rollup), KiB."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--settings", nargs="+", default=["glibc", "jemalloc"], choices=list(SETTINGS))
    parser.add_argument("--param-dtype", choices=["bf16", "fp32"], default=None,
                        help="the update's compute dtype; default: what the laptop demo uses on this CPU")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.param_dtype is None:
        sys.path.insert(0, str(Path(__file__).parents[1]))
        from examples.chains.demo import cpu_has_bfloat16_matmuls

        args.param_dtype = "bf16" if cpu_has_bfloat16_matmuls() else "fp32"
    if args.child:
        print(json.dumps(run_updates(args.updates, args.param_dtype)))
        return
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("AGENTR1_MALLOC", "AGENTR1_MALLOC_PRELOADED", "LD_PRELOAD", *THP)}
    results = {}
    for name in args.settings:
        done = subprocess.run([sys.executable, __file__, "--child", "--updates", str(args.updates),
                               "--param-dtype", args.param_dtype],
                              env={**clean, "HF_HUB_OFFLINE": "1", **SETTINGS[name]}, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    print(f"transparent huge pages (kernel): {thp.read_text().strip() if thp.exists() else 'not available'}; "
          f"update in {args.param_dtype}")
    print("| setting | malloc | update | minor faults | user s | system s | wall s | RSS after, GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, result in results.items():
        for i, u in enumerate(result["updates"]):
            print(f"| {name} | {result['malloc']} | {i + 1} | {u['faults']:,} | {u['user_s']} | {u['sys_s']} | "
                  f"{u['wall_s']} | {u['rss_gib']} |")
        print(f"| {name} | | peak (huge pages at the end: {result['huge_pages_gib']} GiB) | | | | | {result['peak_gib']} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
