"""Gateway counters in Prometheus' text exposition format (no client library needed)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from agentr1.gateway.backends.base import EngineStatsReport, engine_counters

LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


@dataclass
class Metrics:
    calls: int = 0
    errors: int = 0
    drift: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))
    latency_sum_ms: float = 0.0
    in_flight: int = 0

    def observe_call(self, latency_ms: float, prompt_tokens: int, completion_tokens: int) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_MS, latency_ms)] += 1
        self.latency_sum_ms += latency_ms

    def render(self, *, write_queue: int, steps_committed: int, steps_failed: int,
               write_lag_s: float, policy_version: int, backend: dict[str, float] | None = None) -> str:
        lines = [
            "# TYPE agentr1_calls_total counter", f"agentr1_calls_total {self.calls}",
            "# TYPE agentr1_errors_total counter", f"agentr1_errors_total {self.errors}",
            "# TYPE agentr1_drift_total counter", f"agentr1_drift_total {self.drift}",
            "# TYPE agentr1_prompt_tokens_total counter", f"agentr1_prompt_tokens_total {self.prompt_tokens}",
            "# TYPE agentr1_completion_tokens_total counter",
            f"agentr1_completion_tokens_total {self.completion_tokens}",
            "# TYPE agentr1_requests_in_flight gauge", f"agentr1_requests_in_flight {self.in_flight}",
            "# TYPE agentr1_store_queue_depth gauge", f"agentr1_store_queue_depth {write_queue}",
            "# TYPE agentr1_store_steps_committed_total counter",
            f"agentr1_store_steps_committed_total {steps_committed}",
            "# TYPE agentr1_store_steps_failed_total counter", f"agentr1_store_steps_failed_total {steps_failed}",
            "# TYPE agentr1_store_commit_seconds gauge", f"agentr1_store_commit_seconds {write_lag_s:.6f}",
            "# TYPE agentr1_policy_version gauge", f"agentr1_policy_version {policy_version}",
        ]
        for name, value in (backend or {}).items():
            lines += [f"# TYPE agentr1_backend_{name} gauge", f"agentr1_backend_{name} {value:g}"]
        lines.append("# TYPE agentr1_call_latency_ms histogram")
        cumulative = 0
        for bound, count in zip((*LATENCY_BUCKETS_MS, "+Inf"), self.latency_counts, strict=True):
            cumulative += count
            lines.append(f'agentr1_call_latency_ms_bucket{{le="{bound}"}} {cumulative}')
        lines += [f"agentr1_call_latency_ms_sum {self.latency_sum_ms:.3f}", f"agentr1_call_latency_ms_count {self.calls}"]
        return "\n".join(lines) + "\n"


def backend_gauges(engine: EngineStatsReport | None) -> dict[str, float]:
    """What a backend that reports its engine (``BackendAbilities.engine_stats``) exposes about its load, read without
    locking or changing it: the depth of its request queue and its engine's counters (forward passes, tokens generated,
    ...). Empty for a backend that reports none (``None``)."""
    if engine is None:
        return {}
    return {"queue_depth": float(engine.queue_depth), **engine_counters(engine)}
