"""End a thread's OpenMP worker threads when its burst of parallel work is over.

Every thread that runs a parallel PyTorch operation on the CPU gets its own OpenMP pool of worker threads, and
GNU OpenMP (libgomp, what PyTorch's Linux wheels use) counts the workers of every pool in the process. Once they
outnumber the CPUs, every pool's workers spin only ~100 times before sleeping on a futex, and each parallel region
pays a wake-up system call. In the trainer's process the engine's thread decodes with its pool while the update's
thread (and the event loop's, after a weight sync) keeps an idle one: measured on a 2-core VM, a decode-shaped loop
of 3,000 small products on 2 threads took 0.54 s with one pool and 0.79 s once another thread had run one parallel
product (0.12 s of system time, 6,000 context switches); with that thread's pool ended, 0.52 s.
:func:`release_openmp_threads`, called by that thread after its work, ends its pool (OpenMP 5's
``omp_pause_resource_all``); its next parallel operation starts a new one. :class:`OpenMPReleasingExecutor` does it
after every job of an event loop's default executor (``asyncio.to_thread``: padding a batch, loading weights into
the engine, an update), where each worker thread would otherwise keep a pool of its own: a demo run had five.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["OpenMPReleasingExecutor", "release_openmp_threads"]

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: free the threads, keep the settings
_RUNTIMES = ("libgomp", "libomp", "libiomp5")  # GNU, LLVM, Intel: the library names as mapped into the process


_looked_up: list[Any] = []  # once torch is imported: the runtime's function, or None


def _pause() -> Any:
    """``omp_pause_resource_all`` of the OpenMP runtime torch loaded, or None (torch not imported yet, no OpenMP
    runtime, or one too old). Only a runtime already mapped is opened: opening one by name must not load a second.
    Looked up once torch is imported (the gateway's store writes call this after every job: no file read each)."""
    if _looked_up:
        return _looked_up[0]
    if "torch" not in sys.modules:
        return None
    _looked_up.append(_find_pause())
    return _looked_up[0]


def _find_pause() -> Any:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        name = path.rsplit("/", 1)[-1]
        if name.startswith(_RUNTIMES) and ".so" in name:
            try:
                pause = ctypes.CDLL(path).omp_pause_resource_all
            except (OSError, AttributeError):
                continue
            pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
            return pause
    return None


def release_openmp_threads() -> bool:
    """End the calling thread's OpenMP worker threads (not other threads'); True when they ended. A no-op where no
    OpenMP runtime is loaded (before torch is imported) or inside a parallel region."""
    pause = _pause()
    if pause is None:
        return False
    return pause(OMP_PAUSE_SOFT) == 0


def _then_release(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    finally:
        release_openmp_threads()


class OpenMPReleasingExecutor(ThreadPoolExecutor):
    """A thread pool whose threads end their OpenMP workers after every job (a no-op for a job that ran no parallel
    operation); meant as an event loop's default executor (``loop.set_default_executor``)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return super().submit(_then_release, fn, *args, **kwargs)
