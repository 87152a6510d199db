"""When the local engine's worker admits queued requests (prefills them) before its next decode step.

An admission stalls every running row for a prefill forward: tens of milliseconds on a GPU (44-102
ms measured on the H200, eager kernels), where a captured decode step of 128 rows takes about 5. In
a rollout an agent's calls arrive one by one, as the gateway answers the previous ones, so admitting
each arrival alone made most of the rollout prefills. With rows running, a few queued requests
wait until a quarter of the running rows has queued (or as many as the batch has room for), or the
oldest has waited as long as an admission takes (a moving average of the measured ones, each counted
as at most :data:`MAX_WAIT_S`: a first admission that allocated the cache or captured graphs does not
hold the next ones back): no request waits more than one admission, and admissions stay a bounded
share of the time. With nothing running, or a batch of fewer than eight rows, every arrival is
admitted at once.

An idle worker woken by an arrival first lets the rest of a burst queue (:data:`BURST_QUIET_S` without a new
arrival ends it, :data:`BURST_MAX_S` at most): requests sent together (a batch, the first calls of a rollout)
are prefilled in one admission instead of the first few alone and the others a step later (seen on the H200:
128 requests submitted at once were admitted in two prefills in some runs, one in others).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .rows import Row

__all__ = ["BURST_MAX_S", "BURST_QUIET_S", "MAX_WAIT_S", "AdmissionPolicy"]

MAX_WAIT_S = 0.25
BURST_QUIET_S = 0.001  # a burst has ended when nothing arrived for this long
BURST_MAX_S = 0.02  # an idle worker waits at most this long for a burst to end


class AdmissionPolicy:
    def __init__(self) -> None:
        self.admission_s = 0.0  # what an admission step costs (moving average)

    def admit_now(self, queue: Sequence[Row], running: int, max_batch_size: int) -> bool:
        if not queue or not running:
            return True
        room = max_batch_size - running
        if len(queue) >= max(1, min(room, running // 4)):
            return True
        return time.perf_counter() - queue[0].queued_at >= self.admission_s

    def record(self, seconds: float) -> None:
        """The wall time of a worker step that admitted rows (its prefill and the decode step after it)."""
        seconds = min(seconds, MAX_WAIT_S)
        self.admission_s = 0.8 * self.admission_s + 0.2 * seconds if self.admission_s else seconds
