"""Episodes of one `agentr1 eval` run on the flaky calculator of ``examples/chains`` (``make_retry_tasks``).

Usage: python scripts/gpu/retry_stats.py DB RUN_ID

Prints one JSON object with, for the greedy pass and for the sampled runs of the evaluation (their sessions' group
ids end in ``/greedy/...`` and ``/sampled/...``): ``episodes``, ``tool_calls_per_episode``, ``busy_episodes`` (those
whose calculator answered busy) and ``retried`` (the share of those whose next model call asked the calculator the
same thing again). Success, mean@K and pass@K are the protocol's (``agentr1 eval`` itself).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agentr1.store import SessionRecord, TraceStore


def retried(session: SessionRecord) -> bool | None:
    """None when the calculator never answered busy; else whether the next call repeated the busy call's arguments."""
    for i, step in enumerate(session.steps):
        if any("busy" in str(m.get("content") or "") for m in (step.feedback_messages or [])):
            if i + 1 == len(session.steps):
                return False
            asked = {c["function"]["arguments"] for c in step.action.get("tool_calls") or []}
            again = {c["function"]["arguments"] for c in session.steps[i + 1].action.get("tool_calls") or []}
            return bool(asked & again)
    return None


def episode_summary(sessions: list[SessionRecord]) -> dict[str, Any]:
    busy = [r for r in map(retried, sessions) if r is not None]
    calls = sum(len(st.action.get("tool_calls") or []) for s in sessions for st in s.steps)
    return {"episodes": len(sessions), "tool_calls_per_episode": calls / max(1, len(sessions)),
            "busy_episodes": len(busy), "retried": sum(busy) / max(1, len(busy))}


def retry_stats(db: str, run_id: str) -> dict[str, Any]:
    with TraceStore.open(db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions(run_id, limit=1_000_000)]
    return {kind: episode_summary([s for s in sessions if f"/{kind}/" in (s.group_id or "")])
            for kind in ("greedy", "sampled")}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(json.dumps(retry_stats(*sys.argv[1:])))
