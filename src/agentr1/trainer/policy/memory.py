"""Keep a training process's memory from creeping up step after step (glibc, Linux).

glibc serves a large ``malloc`` with ``mmap`` and returns it to the system on ``free``, but after
such a free it *raises* its mmap threshold (up to 32 MiB on 64-bit), so later large blocks come
from the heap, where freed space is rarely given back. A PyTorch update on the CPU allocates and
frees many tensors of tens to hundreds of MiB of varying sizes (logits over a 49k vocabulary), and
the heap fragments: `agentr1 train` of the calculator with SmolLM2-135M grew from 2 GB to 19 GB of
resident memory over 3 steps and was killed by the OOM killer at 21.6 GB on a 24 GB machine.
With the threshold pinned at 128 KiB (the same as ``MALLOC_MMAP_THRESHOLD_=131072``) the same run
returns to about 3 GB between steps (peaks of 8-9 GB during the update)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # mallopt parameter, <malloc.h>
_pinned = False


def pin_mmap_threshold(nbytes: int = 128 * 1024) -> bool:
    """Fix glibc's mmap threshold (which also stops its dynamic raising); True when it took effect.
    A no-op elsewhere (macOS, musl) and when the environment already chose one."""
    global _pinned
    if _pinned or not sys.platform.startswith("linux"):
        return _pinned
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:  # the user's choice wins
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        _pinned = bool(libc.mallopt(M_MMAP_THRESHOLD, nbytes))
    except (OSError, AttributeError):
        log.debug("mallopt is not available: memory may grow across training steps")
    return _pinned
