"""Shorter GIL hand-offs for a stretch of serving: :func:`gil_switch_interval`.

A thread that gives the GIL up for I/O (a socket send, a SQLite statement, ``os.urandom``) takes it back
only when the thread holding it lets go: at its own next I/O, or when the interpreter asks it to after
the switch interval (5 ms by default, ``sys.getswitchinterval``). In the trainer's process the embedded
gateway's event loop does I/O many times per model call while the trainer's loop, the agent workers'
reader threads and the engine process's pipe threads want the GIL too; each time another thread is
busy, the gateway waits up to the interval. A shorter interval bounds that wait, at the cost of more
frequent switches between threads that compute.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gil_switch_interval"]

_lock = threading.Lock()
_holders = 0  # blocks open now
_saved = 0.0  # the interval before the first of them


@contextmanager
def gil_switch_interval(seconds: float | None) -> Iterator[None]:
    """The interpreter's switch interval set to ``seconds`` for the block (None: left as it is); overlapping
    blocks (from any thread) keep the first one's value, and the last to end restores what was there."""
    global _holders, _saved
    if seconds is None:
        yield
        return
    if seconds <= 0:
        raise ValueError(f"a switch interval must be positive, got {seconds}")
    with _lock:
        if _holders == 0:
            _saved = sys.getswitchinterval()
            sys.setswitchinterval(seconds)
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                sys.setswitchinterval(_saved)
