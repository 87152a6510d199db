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
VAL_QUESTIONS = 50  # the first 50 rows of the file are held out; training samples the other 250


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
    """``n`` tasks of ``split`` ("train" or "val"). Validation takes the first ``n`` held-out questions in
    file order (a stable evaluation set; at most 50); training cycles over the other 250 in a seeded order."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    rows = load_rows()
    if split == "val":
        if n > VAL_QUESTIONS:
            raise ValueError(f"there are only {VAL_QUESTIONS} validation questions, asked for {n}")
        return [_task(row, row["id"]) for row in rows[:n]]
    pool = list(rows[VAL_QUESTIONS:])
    random.Random(seed).shuffle(pool)
    return [_task(pool[i % len(pool)], f"{pool[i % len(pool)]['id']}-{i // len(pool)}") for i in range(n)]
