"""The shipped HotpotQA questions (``data/dev_distractor_300.jsonl``, CC BY-SA 4.0, see data/README.md):
tasks for the trainer, and the paragraphs of all rows pooled into one closed retrieval corpus."""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).parent / "data" / "dev_distractor_300.jsonl"
# disjoint index ranges of the file's rows: val the first 50 (held out since the recipe began), test the next 50,
# training the other 200
SPLIT_ROWS = {"val": range(0, 50), "test": range(50, 100), "train": range(100, 300)}


@dataclass(frozen=True)
class Paragraph:
    title: str
    text: str


@functools.cache
def load_rows(path: Path = DATA_FILE) -> tuple[dict[str, Any], ...]:
    """All rows of the file, in file order (cached: the tasks and the corpus both read it)."""
    with path.open(encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


def load_corpus(path: Path = DATA_FILE) -> list[Paragraph]:
    """Every distinct paragraph (by title; the first occurrence wins) of every row: the gold paragraphs
    of all questions plus their distractors, 2,966 Wikipedia intros."""
    seen: dict[str, Paragraph] = {}
    for row in load_rows(path):
        context = row["context"]
        for title, sentences in zip(context["title"], context["sentences"], strict=True):
            seen.setdefault(title, Paragraph(title=title, text="".join(sentences).strip()))
    return list(seen.values())


def _task(row: dict[str, Any], task_id: str) -> dict[str, Any]:
    return {"id": task_id, "question": row["question"], "answer": row["answer"], "type": row["type"],
            "supporting_titles": sorted(set(row["supporting_facts"]["title"]))}


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` tasks of ``split`` (:data:`SPLIT_ROWS`: "train", "val" or "test"). A held-out split takes its first
    ``n`` questions in file order (a stable evaluation set; at most 50); training cycles over its 200 in a seeded
    order."""
    if split not in SPLIT_ROWS:
        raise ValueError(f"split must be one of {tuple(SPLIT_ROWS)}, not {split!r}")
    rows = load_rows()
    pool = [rows[i] for i in SPLIT_ROWS[split]]
    if split != "train":
        if n > len(pool):
            raise ValueError(f"there are only {len(pool)} {split} questions, asked for {n}")
        return [_task(row, row["id"]) for row in pool[:n]]
    random.Random(seed).shuffle(pool)
    return [_task(pool[i % len(pool)], f"{pool[i % len(pool)]['id']}-{i // len(pool)}") for i in range(n)]
