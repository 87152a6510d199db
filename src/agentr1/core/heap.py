"""Keep Python's full garbage collections off the serving path.

A collection of the oldest generation walks every object the process tracks, with the GIL held. A
process that has imported torch and transformers and serves a gateway tracks about half a million
(measured: 0.26-0.32 s for one full collection; one came every second or third rollout of 128 calculator
sessions against an instant backend), and the trainer's process holds more. For that long the gateway
answers nothing, and an engine process steps nothing.

``gc.freeze()`` moves the objects alive at that moment into a permanent generation that collections
skip; objects made later are collected as usual, and frozen objects freed by reference counting are
still freed. Two ways to use it:

- :func:`freeze_heap`: once, in a process that owns its heap, after its startup (the engine process
  once its model is loaded, an agent worker once its agent is imported).
- :func:`frozen_heap`: around a stretch of serving in a process that also does other work (a rollout in
  the trainer's process): the freeze is undone at the end, so objects of that process that die in
  reference cycles later are still collected.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["freeze_heap", "frozen_heap"]

_lock = threading.Lock()
_holders = 0  # frozen_heap blocks open now
_permanent = False  # freeze_heap was called: nothing here unfreezes


def freeze_heap() -> None:
    """Collect what is garbage now, then freeze the rest for the life of the process."""
    global _permanent
    with _lock:
        gc.collect()
        gc.freeze()
        _permanent = True


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the heap for the block; the last block to end (of several, from any thread) unfreezes it,
    unless :func:`freeze_heap` made the freeze permanent."""
    global _holders
    with _lock:
        _holders += 1
        gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and not _permanent:
                gc.unfreeze()
