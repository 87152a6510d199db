"""Step builders and the writer processes of the concurrency tests.

A plain module (no pytest import) so that `multiprocessing` spawn children can import it.
"""

from __future__ import annotations

from typing import Any

from agentr1.store import StepConflict, StepRecord, TraceStore


def obs_ids(session_id: str, index: int, n: int = 8) -> list[int]:
    """Deterministic observation ids that identify their (session, index)."""
    base = (sum(map(ord, session_id)) * 7919 + index * 104729) % 1_000_000
    return [base + k for k in range(n)]


def make_step(session_id: str, index: int, *, n_obs: int = 8, n_act: int = 4, **fields: Any) -> StepRecord:
    values: dict[str, Any] = {
        "observation_ids": obs_ids(session_id, index, n_obs),
        "action_ids": [index * 10 + k for k in range(n_act)],
        "action_logprobs": [-0.5 * (k + 1) for k in range(n_act)],
        "messages_sent": [{"role": "user", "content": f"turn {index}"}],
        "messages_seen": [{"role": "user", "content": f"turn {index}"}],
        "action": {"content": f"answer {index}", "tool_calls": [], "reasoning": None},
        "finish_reason": "stop",
    }
    values.update(fields)
    return StepRecord(session_id=session_id, index=index, **values)


def write_steps(url: str, worker: int, own_session: str, shared_session: str, n_workers: int, n_steps: int,
                contested_index: int) -> dict[str, int]:
    """One writer: steps of its own session (half single inserts, half one batch), its share of the
    indices of the shared session (one at a time), then a race for one contested shared index."""
    conflicts = 0
    with TraceStore.open(url, migrate=False) as store:
        half = n_steps // 2
        for i in range(half):
            store.append_steps([make_step(own_session, i)])
        store.append_steps([make_step(own_session, i) for i in range(half, n_steps)])
        for k in range(n_steps):
            store.append_steps([make_step(shared_session, worker + k * n_workers)])
        try:
            store.append_steps([make_step(shared_session, contested_index)])
        except StepConflict:
            conflicts += 1
    return {"worker": worker, "conflicts": conflicts}


def open_and_write(url: str, worker: int) -> str:
    """Open a possibly unmigrated database (migrating it) and write one session with one step."""
    with TraceStore.open(url, migrate=True) as store:
        sid = store.create_session(run_id="shared-run", session_id=f"proc-{worker}")
        store.append_steps([make_step(sid, 0)])
    return sid
