"""Per-task success of one stored evaluation with K samples per task: mean@K, pass@K (unbiased), and the retries.

Usage: python scripts/gpu/sample_metrics.py DB RUN_ID [K]   (K: the pass@K to report; default the samples per task)

Prints one JSON object: the episode statistics of ``episode_stats.py``, ``samples_per_task``, ``mean_at_n`` (the share
of successful samples), ``pass_at_k`` (the unbiased estimator 1 - C(n-c, k) / C(n, k) per task, averaged over tasks,
n the task's samples and c its successes), ``counts`` (task id -> successes) and, for the flaky calculator of
``examples/chains`` (``make_retry_tasks``), ``busy_episodes`` (episodes whose calculator answered busy) and
``retried`` (the share of those whose next model call asked the calculator the same thing again).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from math import comb
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from episode_stats import episode_stats  # noqa: E402

from agentr1.store import SessionRecord, TraceStore  # noqa: E402


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of a task with c successes in n samples (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def _retried(session: SessionRecord) -> bool | None:
    """None when the calculator never answered busy; else whether the next call repeated the busy call's arguments."""
    for step, after in zip(session.steps, session.steps[1:], strict=False):
        feedback = [str(m.get("content") or "") for m in (step.feedback_messages or [])]
        if any("busy" in text for text in feedback):
            asked = [c["function"]["arguments"] for c in step.action.get("tool_calls") or []]
            again = [c["function"]["arguments"] for c in after.action.get("tool_calls") or []]
            return bool(set(asked) & set(again))
    if session.steps and any("busy" in str(m.get("content") or "") for m in (session.steps[-1].feedback_messages or [])):
        return False
    return None


def sample_metrics(db: str, run_id: str, k: int | None = None) -> dict[str, Any]:
    with TraceStore.open(db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions(run_id, limit=1_000_000)]
    samples = Counter(s.task_id for s in sessions)
    wins = Counter(s.task_id for s in sessions if (s.reward or 0.0) > 0)
    n = min(samples.values())
    k = k or n
    retries = [r for r in map(_retried, sessions) if r is not None]
    return {**episode_stats(db, run_id), "tasks": len(samples), "samples_per_task": n,
            "mean_at_n": sum(wins.values()) / max(1, sum(samples.values())),
            f"pass_at_{k}": sum(pass_at_k(samples[t], wins[t], k) for t in samples) / max(1, len(samples)),
            "busy_episodes": len(retries), "retried": sum(retries) / max(1, len(retries)),
            "counts": {t: wins[t] for t in sorted(samples)}}


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    print(json.dumps(sample_metrics(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))))
