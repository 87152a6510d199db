"""The engine's thread count chosen by timing a forward on each count at start (``agentr1/engine/thread_tuner.py``,
``CpuThreads.calibrate``): forwards that really take longer on one count than on another, and the real engine."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from agentr1.engine import cpu_threads
from agentr1.engine.cpu_threads import CpuThreads, usable_cores
from agentr1.engine.thread_tuner import TIMED, fastest_threads


def forward_taking(seconds_by_count: dict[int, float]) -> tuple[object, list[int]]:
    """A forward that sleeps as long as ``seconds_by_count`` says for the current torch thread count; the counts it
    ran on."""
    ran: list[int] = []

    def forward() -> None:
        n = torch.get_num_threads()
        ran.append(n)
        time.sleep(seconds_by_count[n])

    return forward, ran


@pytest.mark.parametrize(("seconds", "best"), [({1: 0.01, 2: 0.03}, 1), ({1: 0.03, 2: 0.01}, 2)])
def test_the_fastest_count_is_chosen(seconds: dict[int, float], best: int) -> None:
    default = torch.get_num_threads()
    forward, ran = forward_taking(seconds)
    try:
        chosen, medians = fastest_threads(forward, [1, 2], torch.set_num_threads)
    finally:
        torch.set_num_threads(default)
    assert chosen == best
    assert ran == [1, 2] + [1, 2] * TIMED  # one untimed forward per count, then the timed ones round the counts
    assert medians[1] == pytest.approx(seconds[1], abs=0.008) and medians[2] == pytest.approx(seconds[2], abs=0.008)


@pytest.mark.skipif(usable_cores() < 2, reason="needs 2 cores to choose between counts")
def test_calibration_is_used_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """CpuThreads uses the fastest count; a second engine of the same model in the process reuses the timings."""
    monkeypatch.setattr(cpu_threads, "_CALIBRATED", {})
    slow_on_two = {n: (0.005 if n == 1 else 0.02) for n in range(1, usable_cores() + 1)}
    results: dict[str, object] = {}

    def run() -> None:
        threads = CpuThreads()
        threads.start()
        threads.ceiling = 2  # (as if two cores were free: the machine running this test may be busy)
        forward, ran = forward_taking(slow_on_two)
        results["chosen"] = threads.calibrate(forward, key="model")
        again = CpuThreads()
        again.start()
        again.ceiling = 2
        results["again"] = again.calibrate(forward, key="model")
        results["forwards"] = len(ran)
        results["in use"] = (threads.threads, torch.get_num_threads())

    default = torch.get_num_threads()
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    torch.set_num_threads(default)
    assert results["chosen"] == 1 and results["again"] == 1
    assert results["forwards"] == 2 * (TIMED + 1)  # timed once, for both engines
    assert results["in use"] == (1, 1)
