"""Which thread count runs the engine's decode steps fastest, found by timing them (:class:`ThreadTuner`).

Counting free cores (``cpu_threads.py``) says how many threads *may* run without waiting on a core that other
work holds; it cannot say whether they are faster. On some machines they are not: on a 2-core cloud VM a 16-row
SmolLM2 forward took 450-560 ms on one thread and 670-1,470 ms on two, with the second core idle or lent to a
niced test run (2026-12-05): a parallel region's barrier waits for a thread whose core the hypervisor or the
scheduler gives back late. So the worker times its decode steps on each candidate count (every count from one to
the free cores' count) and keeps the fastest, per batch size (a power-of-two bucket of rows; a step's time grows
with its rows). A count that lost is tried again for one step after a while (2 s, doubling after each loss up to
32 s), so a change in the machine (a busy process starting or ending) is found within seconds, at the price of
one slower step now and then. The count in use is judged by the median of its last few steps (a step preempted once
does not decide); a count tried again by that one step.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ThreadTuner", "rows_bucket"]

RETRY_S = 2.0  # how long a count that lost waits before one more try
RETRY_MAX_S = 32.0  # the longest such wait (it doubles after each loss)
SAMPLES = 5  # step times kept per (bucket, count)


def rows_bucket(rows: int) -> int:
    """The power of two at or above ``rows`` (steps of similar batch size are compared with each other)."""
    return 1 << max(0, rows - 1).bit_length()


@dataclass
class _Timings:
    """Recent step times of one thread count at one batch size, and when it may be tried again."""

    seconds: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    retry_s: float = RETRY_S
    next_try: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("inf")


class ThreadTuner:
    """Picks the thread count for the next decode step (:meth:`choose`) from the times of earlier ones
    (:meth:`record`). ``clock``: monotonic seconds (a test passes its own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._timings: dict[tuple[int, int], _Timings] = {}
        self._trying: int | None = None  # the count of the step in flight when it is a try of a loser

    def choose(self, rows: int, ceiling: int) -> int:
        """The thread count for a decode step of ``rows`` rows, at most ``ceiling``: the fastest measured so far,
        or for one step a count not measured yet or due for another try."""
        bucket = rows_bucket(rows)
        counts = range(1, max(1, ceiling) + 1)
        best = min(counts, key=lambda n: (self._at(bucket, n).median, -n))
        now = self._clock()
        for n in counts:
            timings = self._at(bucket, n)
            if n != best and now >= timings.next_try:
                timings.seconds.clear()  # the machine may have changed since: this try alone speaks for it
                self._trying = n
                return n
        self._trying = None
        return best

    def record(self, rows: int, threads: int, seconds: float) -> None:
        """A decode step of ``rows`` rows took ``seconds`` on ``threads`` threads."""
        bucket = rows_bucket(rows)
        timings = self._at(bucket, threads)
        timings.seconds.append(seconds)
        if self._trying != threads:
            return
        self._trying = None
        others = [self._at(bucket, n).median for n in self._counts(bucket) if n != threads]
        if others and timings.median >= min(others):  # lost again: wait longer before the next try
            timings.retry_s = min(2 * timings.retry_s, RETRY_MAX_S)
        else:
            timings.retry_s = RETRY_S
        timings.next_try = self._clock() + timings.retry_s

    def fastest(self, rows: int) -> dict[int, float]:
        """The median step time of each count measured at ``rows``'s bucket (for logs and tests)."""
        bucket = rows_bucket(rows)
        return {n: self._at(bucket, n).median for n in sorted(self._counts(bucket))}

    def _counts(self, bucket: int) -> list[int]:
        return [n for (b, n), t in self._timings.items() if b == bucket and t.seconds]

    def _at(self, bucket: int, threads: int) -> _Timings:
        return self._timings.setdefault((bucket, threads), _Timings())
