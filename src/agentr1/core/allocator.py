"""Memory allocation for a training or serving process: freed memory kept for reuse, not faulted in again.

A CPU training step allocates and frees the same large tensors over and over (logits over a 49k vocabulary,
activations, gradients). glibc serves every block over its mmap threshold with a fresh mapping and unmaps it on
free, and gives free memory at the top of its heap back above the trim threshold; the next step faults it all in
again page by page, zero-filled: system time (the laptop demo spent 114.8 s of it against 469.2 s of user
time, 23.7M minor faults, on a 2-core Xeon VM; docs/benchmarks.md "System time").

Two layers, from the strongest:

* :func:`preload_jemalloc`: where the system has jemalloc (Debian/Ubuntu ``libjemalloc2``, Fedora ``jemalloc``),
  the ``agentr1`` command re-executes itself once with it preloaded and told never to return freed pages
  (:data:`JEMALLOC_CONF`); its children inherit both. One demo-shaped policy update: 2.4-2.8M minor faults and
  3.5-7.1 s of system time with glibc, ~0 and 0.05 s with jemalloc, 14.1 -> 11.1 s wall.
  ``AGENTR1_MALLOC=glibc`` keeps glibc (with the settings below), ``AGENTR1_MALLOC=default`` changes nothing.
* :func:`keep_freed_memory` (glibc): raises the trim threshold (256 MiB: the demo at 8 steps peaked at 5.9 GiB with
  it, 6.0-6.3 with 1 GiB) and the top pad and holds the arenas to one per core, in this process (``mallopt``) and,
  through glibc's ``MALLOC_*`` environment variables, in every child it starts. It leaves the mmap threshold alone: which blocks come from the
  heap stays the trainer's choice (``agentr1.trainer.policy.memory`` pins it at 128 KiB: a dynamic threshold let the
  heap fragment to 19 GB) or the caller's. Under jemalloc these settings reach nothing and do no harm.
  On glibc it also asks torch's CPU allocator for transparent huge pages (:data:`TORCH_HUGE_PAGES`: tensors of
  2 MiB and more ``madvise(MADV_HUGEPAGE)``), where the kernel offers them: a fault per 2 MiB instead of per 4 KiB.
  One float32 demo-shaped update on the Zen 1 VM: 3.3-3.5M minor faults -> 66-77K, system 11.1-12.3 s -> 8.0-9.2 s,
  wall 0.94-0.98x, peak the same (3.55 GiB; ``bench/update_memory_bench.py --settings glibc glibc-thp``).

A variable the user already set (``MALLOC_*_``, ``MALLOC_CONF``) wins. No-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from typing import Any

__all__ = ["JEMALLOC_CONF", "KEEP_FREED_BYTES", "MALLOC_SETTINGS", "TORCH_HUGE_PAGES", "jemalloc_library",
           "keep_freed_memory", "malloc_in_use", "preload_jemalloc", "process_memory", "release_freed_memory",
           "transparent_huge_pages"]

# mallopt's parameter numbers (malloc.h) and the environment variable glibc reads for each at start-up
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_ARENA_MAX = -1, -2, -8
MALLOC_SETTINGS: dict[str, tuple[int, int]] = {
    "MALLOC_TRIM_THRESHOLD_": (_M_TRIM_THRESHOLD, 256 << 20),  # give memory back only above 256 MiB free at the top
    "MALLOC_TOP_PAD_": (_M_TOP_PAD, 64 << 20),  # grow the heap 64 MiB at a time
    # one arena per core, not glibc's 8: each arena keeps up to the trim threshold free, and threads that start OpenMP
    # pools anew took new ones (the demo on glibc peaked at 6.81 GiB, 5.72 GiB with 2 arenas on 2 cores)
    "MALLOC_ARENA_MAX": (_M_ARENA_MAX, max(2, os.cpu_count() or 2)),
}

# torch's CPU allocator reads it once, at its first allocation: set before torch allocates (children inherit it)
TORCH_HUGE_PAGES = "THP_MEM_ALLOC_ENABLE"
_THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


# jemalloc's options (its MALLOC_CONF): never hand freed pages back to the kernel (the decay that would do it
# gradually is what refaults them), and one arena for every thread, so the engine's thread and the update reuse each
# other's freed memory instead of each keeping its own high-water mark
JEMALLOC_CONF = "narenas:1,dirty_decay_ms:-1,muzzy_decay_ms:-1"
_PRELOADED = "AGENTR1_MALLOC_PRELOADED"  # set on the re-executed process: the library it asked for; never twice


def _mode() -> str:
    return os.environ.get("AGENTR1_MALLOC", "").strip().lower()


def jemalloc_library() -> str | None:
    """The system's jemalloc as the dynamic loader finds it (``libjemalloc.so.2``), or None."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.util.find_library("jemalloc")


def malloc_in_use() -> str:
    """``"jemalloc"`` when this process runs on jemalloc, else the C library's name (``"glibc"``, ...)."""
    try:
        with open("/proc/self/maps") as maps:
            if any("libjemalloc" in line for line in maps):
                return "jemalloc"
    except OSError:
        pass
    return platform.libc_ver()[0] or "unknown"


def preload_jemalloc() -> None:
    """Re-execute this Python process, same arguments, with the system's jemalloc preloaded (``LD_PRELOAD``) and
    :data:`JEMALLOC_CONF` (unless ``MALLOC_CONF`` is set); children inherit both. Returns without doing anything
    where it does not apply: not Linux, no jemalloc, ``AGENTR1_MALLOC`` set to ``glibc`` or ``default``, or this
    process is already the re-executed one. Call it first thing, before threads or files are opened: ``os.execve``
    replaces the process."""
    if _mode() in ("glibc", "default") or os.environ.get(_PRELOADED) or malloc_in_use() == "jemalloc":
        return
    library = jemalloc_library()
    if library is None:
        return
    env = dict(os.environ)
    env[_PRELOADED] = library
    env["LD_PRELOAD"] = " ".join(filter(None, [library, env.get("LD_PRELOAD", "")]))
    env.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    sys.stdout.flush()
    sys.stderr.flush()
    script = sys.orig_argv[1] if len(sys.orig_argv) > 1 else ""
    if script and script == sys.argv[0] and os.access(script, os.X_OK):  # a console script: keeps its process name
        os.execve(script, [script, *sys.orig_argv[2:]], env)
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


_ALL_ARENAS = 4096  # jemalloc's MALLCTL_ARENAS_ALL
KEEP_FREED_BYTES = 1 << 30  # release_freed_memory gives everything back once more than this lies freed


def _mallctl() -> Any:
    mallctl = ctypes.CDLL(None).mallctl
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return mallctl


def _freed_bytes(mallctl: Any) -> int | None:
    """Bytes jemalloc holds freed (dirty pages of every arena), or None where its statistics are off."""
    epoch, pages, size = ctypes.c_uint64(1), ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
    if mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.sizeof(epoch)) != 0:
        return None
    if mallctl(f"stats.arenas.{_ALL_ARENAS}.pdirty".encode(), ctypes.byref(pages), ctypes.byref(size), None, 0) != 0:
        return None
    return pages.value * os.sysconf("SC_PAGE_SIZE")


def process_memory() -> dict[str, float]:
    """This process's memory in GiB: ``rss_gb`` now, ``peak_gb`` (its high-water mark so far, what the process's
    maximum RSS will report) and, under jemalloc, ``freed_kept_gb`` (freed pages it keeps for reuse: part of the
    RSS). Empty where ``/proc`` is not there (not Linux)."""
    try:
        with open("/proc/self/status") as status:
            fields = dict(line.split(":", 1) for line in status if line.startswith(("VmRSS", "VmHWM")))
    except OSError:
        return {}
    out = {"rss_gb": int(fields["VmRSS"].split()[0]) / 2**20, "peak_gb": int(fields["VmHWM"].split()[0]) / 2**20}
    if malloc_in_use() == "jemalloc":
        freed = _freed_bytes(_mallctl())
        if freed is not None:
            out["freed_kept_gb"] = freed / 2**30
    return out


def release_freed_memory(keep_bytes: int = KEEP_FREED_BYTES) -> bool:
    """Under jemalloc, give every freed page back to the system (``arena.<all>.purge``) once more than
    ``keep_bytes`` lie freed; True when it did.

    With :data:`JEMALLOC_CONF` jemalloc keeps what it frees, so within a phase of work (an update's micro-batches)
    nothing is faulted in twice, but what one phase freed can pile up beside the next phase's own peak (the laptop
    demo's SFT stage grew to 7.7 GiB over 6 steps). Called between phases (``LocalPolicy``'s updates, before and
    after), it bounds a process at its largest phase's peak plus ``keep_bytes``, and costs a fault per page only when
    it gives memory back. Under glibc a no-op: the trim and mmap thresholds decide what goes back there."""
    if malloc_in_use() != "jemalloc":
        return False
    mallctl = _mallctl()
    freed = _freed_bytes(mallctl)
    if freed is not None and freed <= keep_bytes:
        return False
    return mallctl(f"arena.{_ALL_ARENAS}.purge".encode(), None, None, None, 0) == 0


def transparent_huge_pages() -> str:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``), or ``""`` where it has none."""
    try:
        with open(_THP_MODE) as mode:
            text = mode.read()
    except OSError:
        return ""
    return text[text.find("[") + 1:text.find("]")] if "[" in text else ""


def keep_freed_memory() -> dict[str, int]:
    """Apply :data:`MALLOC_SETTINGS` to this process and its future children, and on glibc malloc
    :data:`TORCH_HUGE_PAGES` where the kernel has transparent huge pages (for this process only if torch has not
    allocated yet); returns the settings applied (empty where it did nothing: not glibc, ``AGENTR1_MALLOC=default``;
    without a variable the user set)."""
    if _mode() == "default" or platform.libc_ver()[0] != "glibc":
        return {}
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    applied = {}
    for name, (param, value) in MALLOC_SETTINGS.items():
        if name in os.environ:
            continue  # the user chose; glibc read it at start-up
        if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1:
            os.environ[name] = str(value)
            applied[name] = value
    if (TORCH_HUGE_PAGES not in os.environ and malloc_in_use() == "glibc"
            and transparent_huge_pages() in ("always", "madvise")):
        os.environ[TORCH_HUGE_PAGES] = "1"
        applied[TORCH_HUGE_PAGES] = 1
    return applied
