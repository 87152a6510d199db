"""Exact match, F1 and tool use of a recorded run: ``python -m examples.hotpotqa.score_run DB [RUN_ID]``.

``agentr1 eval`` reports the configured reward (F1); this reads the same sessions back from the trace
store and adds exact match and how often the agent searched. RUN_ID defaults to the newest run."""

from __future__ import annotations

import json
import sys

from examples.hotpotqa.data import load_rows
from examples.hotpotqa.rewards import exact_match_reward, f1_reward

from agentr1.store import TraceStore


def score_run(db: str, run_id: str | None = None) -> dict[str, float | str]:
    answers = {row["id"]: {"answer": row["answer"]} for row in load_rows()}
    with TraceStore.open(db) as store:
        runs = [r for r in store.list_runs() if r.n_sessions and (run_id is None or r.id == run_id)]
        if not runs:
            raise SystemExit(f"no run {run_id or ''} with sessions in {db}")
        run = max(runs, key=lambda r: r.created_at or 0) if run_id is None else runs[0]
        sessions = [store.get_session(s.id) for s in store.list_sessions(run.id, limit=100_000)]
    scored = [s for s in sessions if s.status == "finished" and (s.task_id or "").split("-")[0] in answers]
    if not scored:
        raise SystemExit(f"run {run.id} has no finished HotpotQA sessions")
    tasks = [answers[(s.task_id or "").split("-")[0]] for s in scored]
    n = len(scored)
    return {"run_id": run.id, "sessions": n, "failed": len(sessions) - n,
            "exact_match": sum(exact_match_reward(s, t) for s, t in zip(scored, tasks, strict=True)) / n,
            "f1": sum(f1_reward(s, t) for s, t in zip(scored, tasks, strict=True)) / n,
            "searched": sum(any(st.action.get("tool_calls") for st in s.steps) for s in scored) / n,
            "model_calls_per_session": sum(len(s.steps) for s in scored) / n}


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    print(json.dumps(score_run(*sys.argv[1:])))
