"""The engine's thread choice by timing its decode steps (``agentr1/engine/thread_tuner.py``): the step times
are given (a machine where one count is faster, then one where the other is), the clock is the test's."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from agentr1.engine.thread_tuner import RETRY_MAX_S, ThreadTuner, rows_bucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_steps(tuner: ThreadTuner, clock: Clock, steps: int, rows: int, ceiling: int,
              step_s: Callable[[int], float]) -> list[int]:
    """``steps`` decode steps of ``rows`` rows, each taking ``step_s(threads)``; the counts used."""
    used = []
    for _ in range(steps):
        threads = tuner.choose(rows, ceiling)
        seconds = step_s(threads)
        clock.now += seconds
        tuner.record(rows, threads, seconds)
        used.append(threads)
    return used


@pytest.mark.parametrize(("rows", "bucket"), [(1, 1), (2, 2), (3, 4), (16, 16), (17, 32)])
def test_rows_bucket(rows: int, bucket: int) -> None:
    assert rows_bucket(rows) == bucket


@pytest.mark.parametrize("faster", [1, 2])
def test_the_faster_count_is_kept(faster: int) -> None:
    """Whichever count runs the steps faster is used for nearly all of them; the other is only tried now and then."""
    clock = Clock()
    tuner = ThreadTuner(clock)
    used = run_steps(tuner, clock, 200, 16, 2, lambda n: 0.1 if n == faster else 0.3)
    assert used[-150:].count(faster) >= 145
    assert tuner.fastest(16) == {1: pytest.approx(0.1 if faster == 1 else 0.3),
                                 2: pytest.approx(0.1 if faster == 2 else 0.3)}


def test_a_loser_is_tried_less_often_each_time_it_loses() -> None:
    clock = Clock()
    tuner = ThreadTuner(clock)
    used = run_steps(tuner, clock, 2000, 16, 2, lambda n: 0.05 if n == 1 else 0.2)  # 100+ s of steps
    tries = [i for i, n in enumerate(used) if n == 2]
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps == sorted(gaps) and gaps[-1] * 0.05 >= RETRY_MAX_S * 0.9  # backing off up to the longest wait
    assert len(tries) <= 12


def test_a_change_of_the_machine_is_followed() -> None:
    """One thread wins while the second core is slow; once it is fast, two threads take over within seconds."""
    clock = Clock()
    tuner = ThreadTuner(clock)
    run_steps(tuner, clock, 100, 16, 2, lambda n: 0.1 if n == 1 else 0.4)
    used = run_steps(tuner, clock, 400, 16, 2, lambda n: 0.1 if n == 1 else 0.05)
    last_on_one = max(i for i, n in enumerate(used) if n == 1)
    assert used[last_on_one + 1:] == [2] * (400 - last_on_one - 1)
    assert 0.1 * last_on_one <= RETRY_MAX_S + 2  # found within the longest wait between tries


def test_counts_above_the_ceiling_are_not_used() -> None:
    clock = Clock()
    tuner = ThreadTuner(clock)
    used = run_steps(tuner, clock, 100, 8, 1, lambda n: 0.1)
    assert set(used) == {1}
    used = run_steps(tuner, clock, 100, 8, 4, lambda n: 0.4 / n)  # four cores free: four threads are fastest
    assert used[-20:] == [4] * 20


def test_batch_sizes_are_judged_apart() -> None:
    """One thread is faster for one row, two for sixteen: each bucket keeps its own."""
    clock = Clock()
    tuner = ThreadTuner(clock)
    for _ in range(100):
        run_steps(tuner, clock, 1, 1, 2, lambda n: 0.02 if n == 1 else 0.04)
        run_steps(tuner, clock, 1, 16, 2, lambda n: 0.2 if n == 1 else 0.1)
    best = {rows: min(tuner.fastest(rows), key=tuner.fastest(rows).__getitem__) for rows in (1, 16)}
    assert best == {1: 1, 16: 2}
