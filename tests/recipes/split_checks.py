"""Checks that a recipe's train, val and test tasks share nothing: by id and by content (the question a model
sees, and whatever else a recipe names as content), over the task sets its configs actually load."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

from agentr1.trainer.config import JobConfig
from agentr1.trainer.tasks import SPLITS, load_tasks

ROOT = Path(__file__).resolve().parents[2]

Task = dict[str, Any]
ContentKeys = Callable[[Task], Iterable[Hashable]]


def question_text(task: Task) -> str:
    """What the model is asked, case and spacing aside: the last user message of an Agent-R1 row, else the
    row's ``question``."""
    users = [m["content"] for m in task.get("prompt") or [] if m.get("role") == "user"]
    text = users[-1] if users else task["question"]
    return " ".join(str(text).lower().split())


def shared_content(splits: dict[str, list[Task]], keys: ContentKeys) -> dict[tuple[str, str], set[Hashable]]:
    """For every pair of splits, the content keys (``keys`` of a task: one or more) both of them hold."""
    held = {name: {k for task in tasks for k in keys(task)} for name, tasks in splits.items()}
    return {(a, b): held[a] & held[b] for a, b in itertools.combinations(held, 2) if held[a] & held[b]}


def assert_splits_disjoint(splits: dict[str, list[Task]], *keys: ContentKeys) -> None:
    """No two splits share a task id or any content key of ``keys`` (e.g. ``question_key``); no split is empty."""
    assert keys, "name the content that must not cross splits"
    assert all(splits.values()), {name: len(tasks) for name, tasks in splits.items()}
    for key in (lambda t: [t["id"]], *keys):
        overlap = shared_content(splits, key)
        assert not overlap, {pair: sorted(map(str, found))[:5] for pair, found in overlap.items()}


def question_key(task: Task) -> list[str]:
    """:func:`question_text` as a content key."""
    return [question_text(task)]


def config_splits(config: str, overrides: list[str] | None = None) -> dict[str, list[Task]]:
    """The three task sets a recipe's config loads (``agentr1.trainer.tasks.load_tasks``)."""
    job = JobConfig.from_yaml(ROOT / config, overrides or [])
    return {split: load_tasks(job.data, split) for split in SPLITS}
