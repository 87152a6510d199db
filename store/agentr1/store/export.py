"""Export a run to JSONL (one session per line, the shape of GET /sessions/{id}) or parquet
(one step per row with its session's columns), streaming: memory stays bounded."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentr1.store.records import SessionRecord
from agentr1.store.schema import SESSION_STATUSES
from agentr1.store.store import TraceStore

FORMATS = ("jsonl", "parquet")


def export_run(
    store: TraceStore,
    run_id: str | None,
    path: str | Path,
    *,
    fmt: str | None = None,
    statuses: tuple[str, ...] = SESSION_STATUSES,
) -> int:
    """Write the run's sessions to ``path``; returns the number of sessions written."""
    path = Path(path)
    fmt = fmt or path.suffix.lstrip(".")
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; use one of {FORMATS} (or a .jsonl/.parquet path)")
    sessions = store.iter_sessions(run_id, statuses=statuses)
    return _write_jsonl(sessions, path) if fmt == "jsonl" else _write_parquet(sessions, path)


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _write_jsonl(sessions: Iterator[SessionRecord], path: Path) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for session in sessions:
            fh.write(json.dumps(session.to_dict(), default=_default, ensure_ascii=False) + "\n")
            n += 1
    return n


_SESSION_COLUMNS = ("run_id", "task_id", "group_id", "status")
_JSON_COLUMNS = ("messages_sent", "messages_seen", "tools", "sampling", "action", "feedback_messages")


def _step_rows(session: SessionRecord) -> list[dict[str, Any]]:
    rows = []
    for step in session.steps:
        row = step.to_dict()
        for col in _JSON_COLUMNS:
            row[col] = json.dumps(row[col], default=_default)
        row.update({c: getattr(session, c) for c in _SESSION_COLUMNS})
        row["session_reward"] = session.reward
        rows.append(row)
    return rows


def _write_parquet(sessions: Iterator[SessionRecord], path: Path, batch_rows: int = 2048) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("session_id", pa.string()), ("index", pa.int32()), ("parent_index", pa.int32()),
        ("run_id", pa.string()), ("task_id", pa.string()), ("group_id", pa.string()), ("status", pa.string()),
        ("observation_ids", pa.list_(pa.int32())), ("action_ids", pa.list_(pa.int32())),
        ("action_logprobs", pa.list_(pa.float32())), ("feedback_ids", pa.list_(pa.int32())),
        *[(c, pa.string()) for c in _JSON_COLUMNS],
        ("finish_reason", pa.string()), ("policy_version", pa.int32()), ("backend", pa.string()),
        ("model", pa.string()), ("trainable", pa.bool_()), ("drift", pa.bool_()), ("latency_ms", pa.float64()),
        ("reward", pa.float64()), ("session_reward", pa.float64()), ("created_at", pa.timestamp("us", tz="UTC")),
    ])
    n, pending = 0, []
    with pq.ParquetWriter(path, schema) as writer:
        for session in sessions:
            n += 1
            pending.extend(_step_rows(session))
            if len(pending) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(pending, schema=schema))
                pending = []
        writer.write_table(pa.Table.from_pylist(pending, schema=schema))
    return n
