"""glibc malloc settings for a training or serving process: keep freed heap memory for reuse.

A CPU training step allocates and frees the same tensors over and over. glibc gives the free memory at the top of
its heap back to the kernel as soon as it exceeds the trim threshold (128 KiB while the mmap threshold is fixed, as
the trainer and the demo fix it), and the next step faults it in again page by page, zero-filled: system time (the
laptop demo spent 113 s of it against 431 s of user time; issue 41, docs/benchmarks.md "System time").

:func:`keep_freed_memory` raises the trim threshold (256 MiB: the demo at 8 steps peaked at 5.9 GiB with it, 6.0-6.3 with 1 GiB) and the top pad, in this process (``mallopt``) and, through
glibc's ``MALLOC_*_`` environment variables, in every child it starts (the engine process, agent workers, the
demo's stages). It leaves the mmap threshold alone: which blocks come from the heap stays the trainer's choice
(``agentr1.trainer.policy.memory`` pins it at 128 KiB: a dynamic threshold let the heap fragment to 19 GB) or the
caller's. A variable the user already set wins; ``AGENTR1_MALLOC=default`` keeps glibc's defaults. No-op where the C
library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["MALLOC_SETTINGS", "keep_freed_memory"]

# mallopt's parameter numbers (malloc.h) and the environment variable glibc reads for each at start-up
_M_TRIM_THRESHOLD, _M_TOP_PAD = -1, -2
MALLOC_SETTINGS: dict[str, tuple[int, int]] = {
    "MALLOC_TRIM_THRESHOLD_": (_M_TRIM_THRESHOLD, 256 << 20),  # give memory back only above 256 MiB free at the top
    "MALLOC_TOP_PAD_": (_M_TOP_PAD, 64 << 20),  # grow the heap 64 MiB at a time
}


def keep_freed_memory() -> dict[str, int]:
    """Apply :data:`MALLOC_SETTINGS` to this process and its future children; returns the settings applied
    (empty where it did nothing: not glibc, ``AGENTR1_MALLOC=default``; without a variable the user set)."""
    if os.environ.get("AGENTR1_MALLOC", "").lower() == "default" or platform.libc_ver()[0] != "glibc":
        return {}
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    applied = {}
    for name, (param, value) in MALLOC_SETTINGS.items():
        if name in os.environ:
            continue  # the user chose; glibc read it at start-up
        if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1:
            os.environ[name] = str(value)
            applied[name] = value
    return applied
