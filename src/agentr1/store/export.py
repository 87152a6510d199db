"""Export a run to JSONL (one session per line, the shape of GET /sessions/{id}) or parquet
(one step per row with its session's columns), streaming: memory stays bounded.

Images: the JSONL lines carry them inline in the messages, as the agent sent them; parquet rows keep
the references in the JSON columns and the bytes of the step's images in an ``images`` column
(``sha256``, ``media_type``, ``data``)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentr1.store.blobs import ImageStore, image_refs, inline_images, sniff_media_type
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
    if fmt == "jsonl":
        return _write_jsonl(sessions, path, store.images)
    return _write_parquet(sessions, path, store.images)


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def session_with_images(session: SessionRecord, images: ImageStore) -> dict[str, Any]:
    """``session.to_dict()`` with the steps' image references replaced by the images (as sent)."""
    out = session.to_dict()
    for step in out.get("steps") or []:
        for col in ("messages_sent", "messages_seen", "feedback_messages"):
            if step.get(col):
                step[col] = inline_images(step[col], images)
    return out


def _write_jsonl(sessions: Iterator[SessionRecord], path: Path, images: ImageStore) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for session in sessions:
            fh.write(json.dumps(session_with_images(session, images), default=_default, ensure_ascii=False) + "\n")
            n += 1
    return n


_SESSION_COLUMNS = ("run_id", "task_id", "group_id", "status")
_JSON_COLUMNS = ("messages_sent", "messages_seen", "tools", "sampling", "action", "feedback_messages")


def _step_images(row: dict[str, Any], images: ImageStore) -> list[dict[str, Any]]:
    refs = [*image_refs(row["messages_sent"]), *image_refs(row["messages_seen"]),
            *image_refs(row["feedback_messages"] or [])]
    out = []
    for sha in dict.fromkeys(refs):
        try:
            data = images.get(sha)
        except KeyError:
            data = None  # referenced but not in this image directory: the row says so with null bytes
        out.append({"sha256": sha, "media_type": sniff_media_type(data) if data else None, "data": data})
    return out


def _step_rows(session: SessionRecord, images: ImageStore) -> list[dict[str, Any]]:
    rows = []
    for step in session.steps:
        row = step.to_dict()
        row["images"] = _step_images(row, images)
        for col in _JSON_COLUMNS:
            row[col] = json.dumps(row[col], default=_default)
        row.update({c: getattr(session, c) for c in _SESSION_COLUMNS})
        row["session_reward"] = session.reward
        rows.append(row)
    return rows


def _write_parquet(sessions: Iterator[SessionRecord], path: Path, images: ImageStore, batch_rows: int = 2048) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("session_id", pa.string()), ("index", pa.int32()), ("parent_index", pa.int32()),
        ("run_id", pa.string()), ("task_id", pa.string()), ("group_id", pa.string()), ("status", pa.string()),
        ("observation_ids", pa.list_(pa.int32())), ("action_ids", pa.list_(pa.int32())),
        ("action_logprobs", pa.list_(pa.float32())), ("feedback_ids", pa.list_(pa.int32())),
        *[(c, pa.string()) for c in _JSON_COLUMNS],
        ("finish_reason", pa.string()), ("policy_version", pa.int32()), ("backend", pa.string()),
        ("model", pa.string()), ("model_path", pa.string()), ("trainable", pa.bool_()), ("drift", pa.bool_()), ("latency_ms", pa.float64()),
        ("reward", pa.float64()), ("session_reward", pa.float64()), ("created_at", pa.timestamp("us", tz="UTC")),
        ("images", pa.list_(pa.struct([("sha256", pa.string()), ("media_type", pa.string()), ("data", pa.binary())]))),
    ])
    n, pending = 0, []
    with pq.ParquetWriter(path, schema) as writer:
        for session in sessions:
            n += 1
            pending.extend(_step_rows(session, images))
            if len(pending) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(pending, schema=schema))
                pending = []
        writer.write_table(pa.Table.from_pylist(pending, schema=schema))
    return n
