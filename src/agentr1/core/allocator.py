"""glibc malloc settings for a training or serving process: keep freed memory for reuse.

A CPU training step allocates and frees the same large tensors (activations, gradients, logits) over and over.
With glibc's defaults, a block above the mmap threshold (dynamic: 128 KiB rising to 4 MiB in the demo's stages) is a fresh mapping
that the kernel zero-fills page by page on first touch and unmaps when it is freed, and free heap memory above the
trim threshold (128 KiB) goes back to the kernel, to be faulted in again on the next step. That is system time:
the laptop demo spent 113 s of it against 431 s of user time (issue 41; docs/benchmarks.md, "System time").

:func:`keep_freed_memory` raises the mmap threshold, the trim threshold and the top pad so that large blocks come from
the heap and freed memory stays in the process, both in this process (``mallopt``) and, through
glibc's ``MALLOC_*_`` environment variables, in every child it starts (the engine process, agent workers,
evaluation stages). Settings the user already put in the environment win. Set ``AGENTR1_MALLOC=default`` to keep
glibc's defaults. No-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["MALLOC_SETTINGS", "keep_freed_memory"]

# mallopt's parameter numbers (malloc.h) and the environment variable glibc reads for each at start-up
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
MALLOC_SETTINGS: dict[str, tuple[int, int]] = {
    "MALLOC_TRIM_THRESHOLD_": (_M_TRIM_THRESHOLD, 1 << 30),  # give memory back only above 1 GiB free at the top
    "MALLOC_TOP_PAD_": (_M_TOP_PAD, 256 << 20),  # grow the heap 256 MiB at a time
    "MALLOC_MMAP_THRESHOLD_": (_M_MMAP_THRESHOLD, 1 << 30),  # blocks up to 1 GiB from the heap
}


def keep_freed_memory() -> dict[str, int]:
    """Apply :data:`MALLOC_SETTINGS` to this process and its future children; returns the settings applied
    (empty where it did nothing: not glibc, ``AGENTR1_MALLOC=default``, or the user's own ``MALLOC_*_`` values)."""
    if os.environ.get("AGENTR1_MALLOC", "").lower() == "default" or platform.libc_ver()[0] != "glibc":
        return {}
    if any(name in os.environ for name in MALLOC_SETTINGS):
        return {}  # the user chose; glibc already read them at start-up
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    applied = {}
    for name, (param, value) in MALLOC_SETTINGS.items():
        if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1:
            os.environ[name] = str(value)
            applied[name] = value
    return applied
