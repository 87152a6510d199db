"""ALFWorld rows with a 3-step budget, so the recipe's training test stays short on CPU."""

from __future__ import annotations

from typing import Any

from examples.alfworld.data import make_tasks as full_rows


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    rows = full_rows(split, n, seed)
    for row in rows:
        row["env_kwargs"]["max_steps"] = 3
    return rows
