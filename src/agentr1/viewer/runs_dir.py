"""The trainer's output folders (``trainer.default_local_dir``) under ``--runs-dir``: their
``metrics.jsonl`` (one record per training step), and which stored run each belongs to.

A folder belongs to a run when the run's id is in one of its ``checkpoints/*/trainer_state.json``
(or a ``run_id`` in its ``config.json``); before the first checkpoint, by the job's ``run_name``
when exactly one folder has it (the trainer names runs ``<run_name>-<unix time>``).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
SKIP_DIRS = {"checkpoints", "tensorboard", "hf", "engine", ".git", "__pycache__"}
CACHE_S = 2.0


@dataclass(slots=True)
class OutDir:
    path: Path
    run_ids: list[str] = field(default_factory=list)  # newest checkpoint's run id last
    run_name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def label(self) -> str:
        """The run this folder trains (its newest checkpoint's run id), else the folder's name."""
        return self.run_ids[-1] if self.run_ids else self.path.name


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _step_of(checkpoint: Path) -> int:
    tail = checkpoint.name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def load_out_dir(path: Path) -> OutDir:
    config = _read_json(path / "config.json")
    run_ids: list[str] = []
    if isinstance(config.get("run_id"), str):
        run_ids.append(config["run_id"])
    for checkpoint in sorted((path / "checkpoints").glob("step_*"), key=_step_of):
        run_id = _read_json(checkpoint / "trainer_state.json").get("run_id")
        if isinstance(run_id, str) and run_id not in run_ids:
            run_ids.append(run_id)
    name = config.get("run_name")
    return OutDir(path=path, run_ids=run_ids, run_name=name if isinstance(name, str) else None, config=config)


class RunsDir:
    """Finds output folders under ``root`` (the root itself or up to ``max_depth`` levels below)."""

    def __init__(self, root: str | os.PathLike[str] | None, *, max_depth: int = 3) -> None:
        self.root = Path(root).expanduser() if root else None
        self.max_depth = max_depth
        self._cache: tuple[float, list[OutDir]] | None = None
        self._lock = threading.Lock()

    def out_dirs(self) -> list[OutDir]:
        if self.root is None:
            return []
        import time

        with self._lock:
            if self._cache is not None and time.monotonic() - self._cache[0] < CACHE_S:
                return self._cache[1]
            found = [load_out_dir(p) for p in self._walk(self.root, 0)]
            self._cache = (time.monotonic(), found)
            return found

    def _walk(self, folder: Path, depth: int) -> list[Path]:
        if not folder.is_dir():
            return []
        found = []
        if (folder / METRICS_FILE).exists() or (folder / "checkpoints").is_dir():
            found.append(folder)
        if depth < self.max_depth:
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in SKIP_DIRS)
            except OSError:
                children = []
            for child in children:
                found.extend(self._walk(child, depth + 1))
        return found

    def match(self, run_id: str, run_name: str = "") -> tuple[OutDir | None, str | None]:
        dirs = self.out_dirs()
        for out in dirs:
            if run_id in out.run_ids:
                return out, "run_id"
        by_name = [o for o in dirs if o.run_name and o.run_name == run_name and not o.run_ids
                   and run_id.startswith(f"{o.run_name}-")]
        if len(by_name) == 1:
            return by_name[0], "run_name"
        return None, None

    def relative(self, out: OutDir) -> str:
        if self.root is None:
            return str(out.path)
        try:
            return str(out.path.relative_to(self.root)) or "."
        except ValueError:
            return str(out.path)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl (a partly written last line is skipped)."""
    records = []
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except OSError:
        return []
    return records


def last_metrics(path: Path, tail_bytes: int = 65536) -> dict[str, Any] | None:
    """The newest complete record of a metrics.jsonl, reading only the end of the file."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - tail_bytes))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record
    return None


def metric_keys(records: list[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for record in records:
        for key, value in record.items():
            if key not in ("step", "time") and _number(value) is not None:
                keys[key] = None
    return sorted(keys)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _metric_name(key: str) -> str:
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return f"agentr1_train_{name}"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(runs: RunsDir) -> str:
    """The newest metrics.jsonl values of every output folder as ``agentr1_train_*`` gauges."""
    series: dict[str, list[str]] = {}
    for out in runs.out_dirs():
        record = last_metrics(out.metrics_path)
        if record is None:
            continue
        labels = f'run="{_label(out.label)}",out_dir="{_label(runs.relative(out))}"'
        values = {"step": record.get("step"), "last_update_timestamp_seconds": record.get("time")}
        values.update({k: v for k, v in record.items() if k not in ("step", "time")})
        for key, value in values.items():
            number = _number(value)
            if number is not None:
                series.setdefault(_metric_name(key), []).append(f"{_metric_name(key)}{{{labels}}} {number!r}")
    lines: list[str] = []
    for name in sorted(series):
        lines.append(f"# TYPE {name} gauge")
        lines.extend(series[name])
    return "\n".join(lines) + ("\n" if lines else "")
