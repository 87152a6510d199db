"""Task datasets: JSONL or parquet files, Agent-R1 rows, or a generator function."""

from __future__ import annotations

import inspect
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentr1.core import load_callable
from agentr1.trainer.config import DataConfig

__all__ = ["SPLITS", "SPLIT_SEED_OFFSETS", "TaskSampler", "load_callable", "load_tasks", "normalize_task", "split_size"]


def _read_rows(path: str) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"task file {path} does not exist")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()  # type: ignore[no-any-return]
    with p.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def normalize_task(row: dict[str, Any], index: int) -> dict[str, Any]:
    """Give every task an ``id``; keep Agent-R1's columns (``prompt``, ``agent_name``,
    ``reward_model`` with ``ground_truth``, ``env_kwargs``) as they are, and expose the ground truth
    as ``answer`` when the row has none."""
    task = dict(row)
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    task["id"] = str(row.get("id", row.get("task_id", extra.get("index", index))))
    reward_model = task.get("reward_model")
    if "answer" not in task and isinstance(reward_model, dict) and "ground_truth" in reward_model:
        task["answer"] = reward_model["ground_truth"]
    return task


SPLITS = ("train", "val", "test")
SPLIT_SEED_OFFSETS = {"train": 0, "val": 1_000_003, "test": 2_000_006}  # a generator's seed: data.seed + this


def load_tasks(config: DataConfig, split: str) -> list[dict[str, Any]]:
    """The tasks of ``split`` (``train``, ``val`` or ``test``): the split's files (``data.<split>_files``), else
    ``data.<split>_size`` rows of the generator, called as ``(split, n, data.seed + SPLIT_SEED_OFFSETS[split],
    **generator_kwargs)``. Keeping the splits disjoint is the generator's (or the files') business."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    files = {"train": config.train_files, "val": config.val_files, "test": config.test_files}[split]
    if files:
        rows = [row for f in files for row in _read_rows(f)]
    elif config.generator:
        size = split_size(config, split)
        seed = config.seed + SPLIT_SEED_OFFSETS[split]
        generator = load_callable(config.generator)
        try:
            inspect.signature(generator).bind(split, size, seed, **config.generator_kwargs)
        except TypeError as exc:
            raise ValueError(f"data.generator {config.generator} cannot be called as (split, n, seed, "
                             f"**data.generator_kwargs {config.generator_kwargs}): {exc}") from exc
        rows = list(generator(split, size, seed, **config.generator_kwargs))
    else:
        raise ValueError(f"no {split} tasks: set data.{split}_files or data.generator")
    if not rows:
        raise ValueError(f"the {split} task set is empty")
    return [normalize_task(r, i) for i, r in enumerate(rows)]


def split_size(config: DataConfig, split: str) -> int:
    """How many tasks a generator makes for ``split`` (``data.test_size`` defaults to ``data.val_size``)."""
    if split == "train":
        return config.train_size
    if split == "test" and config.test_size is not None:
        return config.test_size
    return config.val_size


class TaskSampler:
    """Epochs over the tasks in a seeded order; its position is part of a checkpoint."""

    def __init__(self, tasks: list[dict[str, Any]], *, shuffle: bool, seed: int, position: int = 0) -> None:
        self.tasks, self.shuffle, self.seed, self.position = tasks, shuffle, seed, position

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(k):
            epoch, offset = divmod(self.position, len(self.tasks))
            out.append(self.tasks[self._order(epoch)[offset]])
            self.position += 1
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            yield from self.take(1)
