"""Which thread count runs the engine's forwards fastest, found by timing them once, before the engine serves
(:func:`fastest_threads`).

Counting free cores (``cpu_threads.py``) says how many threads *may* run without waiting on a core that other work
holds; it cannot say whether they are faster. On some machines they are not: on a 2-core cloud VM a 16-row SmolLM2
decode step took 534 ms (median) on one thread and 591 ms on two on a quiet machine, and 670-1,470 ms on two beside
a niced test run where one thread took 450-560 ms. So when it starts, the worker times a decode-sized
forward on each count up to the free cores and keeps the fastest.

Once, not all the time: the thread count changes the last bits of some results (log-probabilities differed by
4e-6 between one and two threads on the same batch), and the engine promises that the same batch gives the same
bits (``exact``). A count chosen per step would make that depend on when a try happened; a count chosen at start
changes only when the free cores drop below it (``cpu_threads.py``), as before. (The step whose bits changed with
it, CPU SDPA's one-token attention, is now two batched products in float32 (``slot_cache.decode_attention``), and the
engine samples the same bits on one and two threads; the count is still chosen once.)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable

__all__ = ["fastest_threads"]

TIMED = 5  # timed forwards per count (after one untimed: the first on a new count starts its threads)


def fastest_threads(forward: Callable[[], object], counts: Iterable[int], use: Callable[[int], object],
                    clock: Callable[[], float] = time.perf_counter) -> tuple[int, dict[int, float]]:
    """The count of ``counts`` whose ``forward`` ran fastest (median of :data:`TIMED` runs after one warm-up), and
    each count's median seconds. ``use(n)`` switches to ``n`` threads; on a tie the larger count wins.

    The timed runs go round the counts (1, 2, 1, 2, ...), so that a change of the machine's load while they run
    (a shared VM's neighbours) falls on every count alike: timed one count after the other, two counts 15% apart
    came out 3% apart."""
    counts = list(counts)
    for n in counts:
        use(n)
        forward()
    times: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(TIMED):
        for n in counts:
            use(n)
            started = clock()
            forward()
            times[n].append(clock() - started)
    medians = {n: statistics.median(seconds) for n, seconds in times.items()}
    best = min(medians, key=lambda n: (medians[n], -n))
    return best, medians
