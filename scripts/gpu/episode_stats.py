"""Episode statistics of one stored run (an evaluation): success, episode length, tool calls.

Usage: python scripts/gpu/episode_stats.py DB RUN_ID [OUT.json] [--step last|N] [--pass greedy|sampled]
  DB       the trace store (SQLite path or URL)
  RUN_ID   the run whose sessions are the episodes (`agentr1 eval --run-id`, or a training run's
           `<run id>-eval`, whose sessions carry the training step in metadata["step"]); "*-eval": the one run
           of the store whose id ends with "-eval"
  --step   only the sessions of that evaluation step ("last": the latest one)
  --pass   only the evaluation protocol's greedy or sampled runs (their groups are <run>/step<N>/<pass>/<task>)

Prints (and writes to OUT.json) a JSON object: sessions, success (outcome reward > 0), steps per episode
(model calls), tool calls per episode and per successful episode, the share of episodes with a tool call, the share of steps the environment
penalised (reward < 0: an inadmissible ALFWorld command), and the sessions not finished (failed, running).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agentr1.store import TraceStore


def episode_stats(db: str, run_id: str, step: str | None = None, decoding: str | None = None) -> dict[str, Any]:
    with TraceStore.open(db) as store:
        if run_id.startswith("*"):
            matches = [r.id for r in store.list_runs(limit=10_000) if r.id.endswith(run_id[1:])]
            if len(matches) != 1:
                raise SystemExit(f"{len(matches)} runs of {db} end with {run_id[1:]!r}: {matches}")
            run_id = matches[0]
        summaries = store.list_sessions(run_id, limit=1_000_000)
        if not summaries:
            raise SystemExit(f"run {run_id!r} has no sessions in {db}")
        if step is not None:
            steps = sorted({int(s.metadata.get("step", -1)) for s in summaries})
            chosen = steps[-1] if step == "last" else int(step)
            summaries = [s for s in summaries if int(s.metadata.get("step", -1)) == chosen]
        if decoding is not None:
            summaries = [s for s in summaries if f"/{decoding}/" in (s.group_id or "")]
        sessions = [store.get_session(s.id) for s in summaries]
    won = [s for s in sessions if (s.reward or 0.0) > 0]
    calls = {s.id: sum(len(st.action.get("tool_calls") or []) for st in s.steps) for s in sessions}
    all_steps = [st for s in sessions for st in s.steps]
    n = max(1, len(sessions))
    return {"run_id": run_id, "step": step, "pass": decoding, "sessions": len(sessions), "success": len(won) / n,
            "steps_per_episode": sum(len(s.steps) for s in sessions) / n,
            "tool_calls_per_episode": sum(calls.values()) / n,
            "episodes_with_tool_calls": sum(c > 0 for c in calls.values()) / n,
            "tool_calls_per_success": sum(calls[s.id] for s in won) / max(1, len(won)),
            "penalised_step_share": sum((st.reward or 0.0) < 0 for st in all_steps) / max(1, len(all_steps)),
            "unfinished_sessions": sum(s.status != "finished" for s in sessions)}


def _option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    if name not in argv:
        return None, argv
    i = argv.index(name)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv: list[str]) -> None:
    step, argv = _option(argv, "--step")
    decoding, argv = _option(argv, "--pass")
    if len(argv) not in (2, 3) or decoding not in (None, "greedy", "sampled"):
        raise SystemExit(__doc__)
    stats = episode_stats(argv[0], argv[1], step, decoding)
    text = json.dumps(stats)
    print(text)
    if len(argv) == 3:
        with open(argv[2], "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
