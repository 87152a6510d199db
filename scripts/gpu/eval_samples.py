"""Held-out answers of a training run's evaluations (first and last), for reading what changed.

Usage: python scripts/gpu/eval_samples.py DB OUT.json [N]  (N answers per evaluation, default 12)."""

from __future__ import annotations

import json
import sys

from agentr1.store import TraceStore


def main(db: str, out: str, n: int = 12) -> None:
    with TraceStore.open(db) as store:
        evals = [r for r in store.list_runs(limit=100) if r.id.endswith("-eval")]
        report = {}
        for run in evals:
            sessions = store.list_sessions(run.id, limit=100_000)
            by_step: dict[int, list] = {}
            for s in sessions:
                by_step.setdefault(int(s.metadata.get("step", -1)), []).append(s)
            for step in (min(by_step), max(by_step)) if by_step else ():
                rows = []
                for s in by_step[step][:n]:
                    full = store.get_session(s.id)
                    rows.append({"task": full.task_id, "reward": full.reward, "status": full.status,
                                 "calls": len(full.steps),
                                 "answer": (full.steps[-1].action.get("content") or "") if full.steps else "",
                                 "tool_calls": [c for st in full.steps for c in (st.action.get("tool_calls") or [])]})
                report[f"step_{step}"] = rows
    with open(out, "w") as fh:
        json.dump(report, fh, indent=1, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
