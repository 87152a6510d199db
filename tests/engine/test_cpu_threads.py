"""The embedded engine's CPU threads: one per core that other work leaves free (``agentr1/engine/cpu_threads.py``),
measured on this machine with real busy processes and real threads."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from agentr1.engine.cpu_threads import (
    FIRST_LOOK_S,
    CpuThreads,
    TeamCpu,
    _name_this_thread,
    busy_ticks,
    threads_for,
    usable_cores,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


@pytest.mark.parametrize(("cores", "others_busy", "threads"), [
    (2, 0.0, 2),  # a quiet laptop: every core
    (2, 0.3, 2),  # a light event loop beside it: a core free 70% of the time still counts
    (2, 0.6, 1),  # free less than half the time: left to the other work
    (2, 1.0, 1),  # one busy process (issue 41's case)
    (2, 2.0, 1),  # everything busy: still one
    (2, -0.2, 2),  # measurement noise below zero
    (1, 0.0, 1),
    (16, 3.2, 13),
    (16, 0.0, 16),
])
def test_threads_for_leaves_busy_cores_to_their_work(cores: int, others_busy: float, threads: int) -> None:
    assert threads_for(cores, others_busy) == threads


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@linux_only
def test_team_cpu_counts_only_the_named_threads() -> None:
    """The engine's own CPU (its named threads) is not other work; another thread's CPU is not the engine's."""
    name = "agentr1-test"
    team = TeamCpu(name)
    before = team.seconds()
    burnt, done = threading.Barrier(3), threading.Event()

    def burn_then_wait(own_name: bool) -> None:
        if own_name:
            assert _name_this_thread(name.encode())
        _burn(0.4)
        burnt.wait()
        done.wait()  # alive while measured: a thread that ended is gone from /proc/self/task

    threads = [threading.Thread(target=burn_then_wait, args=(own,)) for own in (True, False)]
    for thread in threads:
        thread.start()
    burnt.wait()
    spent = team.seconds() - before
    done.set()
    for thread in threads:
        thread.join()
    assert 0.3 <= spent <= 0.6, spent
    # the named thread has ended: its time stays the team's (the engine ends its OpenMP threads when idle)
    assert 0.3 <= team.seconds() - before <= 0.6
    assert TeamCpu(name).seconds() == 0.0  # a fresh count never saw it


@linux_only
def test_a_fixed_count_is_kept() -> None:
    default = torch.get_num_threads()
    def run() -> None:
        threads = CpuThreads(1)
        threads.start()
        try:
            assert torch.get_num_threads() == 1 and threads.adjust(force=True) == 1
        finally:
            torch.set_num_threads(default)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


@linux_only
def test_busy_processes_on_every_core_leave_the_engine_one_thread() -> None:
    """With every usable core kept busy by other processes, the choice made at start is one thread."""
    cores = usable_cores()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    chosen: list[int] = []
    threads = CpuThreads()
    default = torch.get_num_threads()
    try:
        time.sleep(1.0)  # the processes are running
        worker = threading.Thread(target=lambda: (threads.start(), chosen.append(threads.threads),
                                                  torch.set_num_threads(default)))
        worker.start()
        worker.join()
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert chosen == [1]


STAT = """cpu  400 300 200 1000 50 0 0 0 0 0
cpu0 100 200 50 500 25 0 0 0 0 0
cpu1 300 100 150 500 25 0 0 0 0 0
intr 1 2 3
"""


def test_busy_ticks_read_the_cores_given_and_niced_time_only_when_asked() -> None:
    assert busy_ticks(STAT, {0, 1}) == 900  # user + nice + system, idle and iowait left out
    assert busy_ticks(STAT, {0}) == 350
    assert busy_ticks(STAT, {0, 1}, count_nice=False) == 600


@linux_only
def test_niced_work_counts_only_for_a_niced_engine() -> None:
    """An engine at normal priority leaves niced processes' time out of "other work" (their cores are its for the
    asking); an engine run under ``nice`` counts it, since it competes with that work on equal terms."""
    probe = ("from agentr1.engine.cpu_threads import CpuThreads; import os; "
             "print(os.getpriority(os.PRIO_PROCESS, 0), CpuThreads()._above_niced_work)")
    base = os.getpriority(os.PRIO_PROCESS, 0)
    niced = subprocess.run(["nice", "-n", "5", sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True).stdout.split()
    assert int(niced[0]) > 0 and niced[1] == "False"  # (nice caps at 19)
    if base <= 0:
        plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        assert plain.split() == [str(base), "True"]


@linux_only
def test_after_a_wait_the_count_covers_the_new_work_not_the_wait() -> None:
    """Other work while the engine waited (here: every core busy for a second, then quiet again) does not cost the
    engine's next work its threads: :meth:`CpuThreads.resume` starts a fresh count. Counted over the wait (a forced
    count, as the worker's next count was before ``resume``), the same second leaves it one thread."""
    cores = usable_cores()
    seen: dict[str, int] = {}
    default = torch.get_num_threads()

    def busy_second() -> None:
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
        time.sleep(1.3)
        for process in busy:
            process.kill()
            process.wait()

    def run() -> None:
        threads = CpuThreads()
        threads.start()
        try:
            seen["start"] = threads.threads
            busy_second()
            seen["stale"] = threads.adjust(force=True)  # the busy second counted
            time.sleep(0.3)
            threads.adjust(force=True)  # quiet again
            busy_second()
            threads.resume()
            seen["resumed"] = threads.adjust()  # the threads as they were, until the first look
            time.sleep(FIRST_LOOK_S + 0.1)
            seen["looked"] = threads.adjust()
        finally:
            torch.set_num_threads(default)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert seen["stale"] == 1
    assert seen["resumed"] == seen["looked"] == seen["start"] == cores, seen
