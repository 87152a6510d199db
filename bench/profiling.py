"""torch.profiler as the engine benchmarks use it: host ops of every thread (the engine runs on its own
worker thread) and the device's kernels, and the two tables that say where each spends its time."""

from __future__ import annotations

from typing import Any

from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile


def every_thread_profiler() -> Any:
    """An unstarted ``torch.profiler.profile`` over the CPU ops of all threads and the CUDA kernels."""
    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   experimental_config=_ExperimentalConfig(profile_all_threads=True))


def print_tables(prof: Any, rows: int = 30) -> None:
    """The ops by device time, then by host time (each table ends with both totals)."""
    events = prof.key_averages()
    for key in ("self_cuda_time_total", "self_cpu_time_total"):
        print(events.table(sort_by=key, row_limit=rows, max_name_column_width=60), flush=True)
