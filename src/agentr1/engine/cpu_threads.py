"""How many CPU threads the embedded engine's torch ops use: at most one per core that other work leaves free,
counted again every second while the engine runs (and a quarter second into its work after it waited for some), and
of those counts the one a decode-sized forward ran fastest on when the engine started (``thread_tuner.py``)
(:class:`CpuThreads`, used by the CPU worker in ``engine.py``).

Why: a forward's parallel regions end on a barrier that waits for every one of its threads. With torch's default
(one thread per core) and one other busy process on a 2-core laptop, one engine thread shares its core with that
process, every region waits for it, and the waiting thread spins a core of its own: the engine made 7-9 tokens/s at
16 sessions where ``model.generate`` made 62-65. With one thread per *free* core there is no such wait;
on a quiet machine the engine may use every core, and does where that is faster.

What counts as other work: everything the machine's cores ran (``/proc/stat``, the cores this process may use)
minus the engine's own threads (the worker and the OpenMP threads it starts, which inherit its name:
``/proc/self/task``). So the gateway's event loop and the agents in this process count as other work too. Niced
processes (a background build, a ``nice`` test run) do not, unless the engine is niced itself: the scheduler gives
an engine at normal priority the core anyway.
Where ``/proc`` is missing (macOS), the engine keeps torch's default.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import os
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

import torch

from agentr1.core import release_openmp_threads

from .thread_tuner import fastest_threads

__all__ = ["CpuThreads", "TeamCpu", "busy_ticks", "threads_for", "usable_cores"]

log = logging.getLogger(__name__)

RECHECK_S = 1.0  # how often the choice is made again while the engine runs
FIRST_LOOK_S = 0.25  # how long the machine is watched before the first choice
ENGINE_THREAD_NAME = b"agentr1-engine"  # the worker's OS name (15 bytes at most), inherited by its OpenMP threads
_PR_SET_NAME = 15  # prctl option, <linux/prctl.h>
_CALIBRATED: dict[tuple[Hashable, int], tuple[int, dict[int, float]]] = {}  # CpuThreads.calibrate's, per process
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_for(cores: int, others_busy: float) -> int:
    """Threads for a forward on ``cores`` usable cores while other work keeps ``others_busy`` cores busy: one per
    core left free (a core counts when it is free at least half the time), at least one, at most ``cores``."""
    free = cores - max(0.0, others_busy)
    return max(1, min(cores, math.floor(free + 0.5)))


def busy_ticks(proc_stat: str, cpus: set[int], *, count_nice: bool = True) -> int:
    """Clock ticks the cores ``cpus`` have spent not idle since boot, from the text of ``/proc/stat``; without
    ``count_nice``, time of niced processes (positive nice values) counts as idle."""
    busy = 0
    for line in proc_stat.splitlines()[1:]:
        if not line.startswith("cpu"):
            break
        name, *fields = line.split()
        if int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            busy += sum(values) - values[3] - values[4] - (0 if count_nice else values[1])
    return busy


def _runs_at_normal_priority() -> bool:
    """Whether this process's nice value is 0 or below: then niced work yields it the CPU (a nice-15 process gets
    ~3% of a core it shares with it) and does not count as other work."""
    try:
        return os.getpriority(os.PRIO_PROCESS, 0) <= 0
    except (AttributeError, OSError):
        return False


def _machine_busy_s(cpus: set[int], *, count_nice: bool = True) -> float | None:
    """CPU seconds the cores ``cpus`` have spent not idle since boot (``/proc/stat``); None without it."""
    try:
        text = Path("/proc/stat").read_text()
    except OSError:
        return None
    return busy_ticks(text, cpus, count_nice=count_nice) / _TICKS


def _named_threads_cpu_s(name: str) -> dict[int, float]:
    """CPU seconds of each of this process's threads called ``name``, by thread id."""
    seconds = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        comm_end = stat.rindex(")")
        if stat[stat.index("(") + 1:comm_end] != name:
            continue
        fields = stat[comm_end + 2:].split()
        seconds[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (proc(5) 14, 15)
    return seconds


class TeamCpu:
    """CPU seconds the threads called ``name`` have used (the engine's worker and its OpenMP threads), counting
    threads that have ended since with the time they had when last seen: the worker ends its OpenMP threads whenever
    the engine goes idle (``engine.py``), and their time must not turn into other work's when they vanish from
    ``/proc/self/task``. (Read :meth:`seconds` just before ending them to count all of it.)"""

    def __init__(self, name: str) -> None:
        self.name = name
        self._seen: dict[int, float] = {}
        self._ended_s = 0.0

    def seconds(self) -> float:
        now = _named_threads_cpu_s(self.name)
        self._ended_s += sum(s for tid, s in self._seen.items() if tid not in now)
        self._seen = now
        return self._ended_s + sum(now.values())


def _name_this_thread(name: bytes) -> bool:
    """Set the calling thread's OS name (Linux; threads it starts afterwards inherit it)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class _Sample:
    at: float
    machine_s: float
    team_s: float


class CpuThreads:
    """The engine worker's torch threads: ``fixed`` if given, else (with ``choose``: on the CPU) at most
    :func:`threads_for` the cores other work leaves free (:attr:`ceiling`, measured over the last second) and the
    fastest of those counts at start (:meth:`calibrate`), else torch's default. All methods run on the worker
    thread."""

    def __init__(self, fixed: int | None = None, *, choose: bool = True) -> None:
        self.fixed = fixed
        self.choose = choose
        self.cores = usable_cores()
        self.threads = fixed or torch.get_num_threads()
        self._cpus: set[int] = set()
        self._last: _Sample | None = None
        self._above_niced_work = _runs_at_normal_priority()
        self.ceiling = self.threads
        self.fastest: int | None = None  # the fastest count up to `calibrated_up_to`, once calibrated
        self.calibrated_up_to = 0
        self.seconds: dict[int, float] = {}  # each count's forward at calibration (for logs and tests)
        self._counting = False  # whether /proc lets the free cores be counted
        self._recheck_s = RECHECK_S  # the next count's window
        self._team = TeamCpu(ENGINE_THREAD_NAME.decode())

    def start(self) -> None:
        """Name the worker thread (before its first parallel region starts OpenMP threads) and choose."""
        if self.fixed:
            torch.set_num_threads(self.fixed)
            return
        if not self.choose:
            return
        try:
            self._cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            return
        if not _name_this_thread(ENGINE_THREAD_NAME) or self._sample() is None:
            return  # not Linux: torch's default
        self._last = self._sample()
        time.sleep(FIRST_LOOK_S)
        self._counting = True
        self.adjust(force=True)

    def calibrate(self, forward: Callable[[], object], key: Hashable) -> int:
        """Time ``forward`` (a decode-sized forward of the engine's model) on each count up to the free cores and
        keep the fastest (:func:`~.thread_tuner.fastest_threads`); returns the threads in use. Timings are kept for
        the process's life under ``key`` (the model and the forward's shape) with the free cores' count: a second
        engine of the same model in this process (a test run, an evaluation) does not time them again."""
        if not self._counting or self.ceiling < 2:
            return self.threads
        known = _CALIBRATED.get((key, self.ceiling))
        if known is None:
            known = _CALIBRATED[(key, self.ceiling)] = fastest_threads(forward, range(1, self.ceiling + 1), self._use)
        best, self.seconds = known
        self.fastest, self.calibrated_up_to = best, self.ceiling
        self._use(best)
        log.info("local engine: %d CPU thread(s), the fastest of %s", best,
                 ", ".join(f"{n}: {1000 * s:.0f} ms" for n, s in self.seconds.items()))
        return best

    def release_pool(self) -> bool:
        """End the worker's OpenMP threads (the engine is idle: ``core/openmp.py`` says why), their CPU time still
        counted as the engine's; True when they ended."""
        if self._counting:
            self._team.seconds()
        return release_openmp_threads()

    def resume(self) -> None:
        """The engine has work again after waiting for it. What the machine did while it waited (another program's
        burst, this process's own work between rollouts: a weight update, a ``generate``) says little about now: the
        next count covers only this work's first :data:`FIRST_LOOK_S`, and the threads stay as they were until then.
        (Counted over the wait, a 16-session run that began right after two busy cores' work ran its first second on
        one thread: 0.85x the tokens/s, bench/local_engine_bench.py.)"""
        if self._counting:
            self._last = self._sample()
            self._recheck_s = FIRST_LOOK_S

    def _use(self, threads: int) -> None:
        if threads != self.threads:
            torch.set_num_threads(threads)
            self.threads = threads

    def _sample(self) -> _Sample | None:
        machine = _machine_busy_s(self._cpus, count_nice=not self._above_niced_work)
        if machine is None:
            return None
        return _Sample(time.monotonic(), machine, self._team.seconds())

    def adjust(self, *, force: bool = False) -> int:
        """Count the free cores again if a second has passed (or ``force``) and use the fastest count they allow;
        returns the threads in use."""
        last = self._last
        if last is None or (not force and time.monotonic() - last.at < self._recheck_s):
            return self.threads
        self._recheck_s = RECHECK_S
        now = self._sample()
        assert now is not None
        elapsed = now.at - last.at
        others = ((now.machine_s - last.machine_s) - (now.team_s - last.team_s)) / elapsed if elapsed > 0 else 0.0
        self._last = now
        ceiling = threads_for(self.cores, others)
        if ceiling != self.ceiling or force:
            log.debug("local engine: up to %d CPU thread(s) (other work kept %.2f of %d cores busy)", ceiling, others,
                      self.cores)
            self.ceiling = ceiling
        # the fastest count measured, while the free cores allow it; all of them where none was measured that high
        wanted = ceiling if self.fastest is None or ceiling > self.calibrated_up_to else min(self.fastest, ceiling)
        if force:
            torch.set_num_threads(wanted)
            self.threads = wanted
        self._use(wanted)
        return self.threads
