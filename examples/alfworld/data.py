"""The 36 shipped ALFWorld games (``data/``, MIT, see data/README.md) as Agent-R1 dataset rows."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"
ENV = "examples.alfworld.env:AlfworldEnv"  # an import path: resolves without importing the recipe first
MAX_STEPS = 12  # the longest expert walkthrough has 9 commands
SAMPLING = {"max_tokens": 24, "temperature": 1.0}


def load_index() -> list[dict[str, Any]]:
    """``data/index.jsonl``: per game its path, task type, goal text and expert walkthrough."""
    with (DATA_DIR / "index.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def game_row(entry: dict[str, Any], task_id: str) -> dict[str, Any]:
    """One Agent-R1 row: ``agent_name`` picks the environment, ``env_kwargs`` the game and the loop's
    budget; no ``reward_model``, since the environment itself reports success and penalties."""
    return {"id": task_id, "data_source": "alfworld", "agent_name": ENV, "task_type": entry["task_type"],
            "prompt": [{"role": "user", "content": f"Your task is to: {entry['goal']}"}],
            "env_kwargs": {"gamefile": entry["gamefile"], "max_steps": MAX_STEPS, "sampling": dict(SAMPLING)}}


def interleaved(games: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The games task type by task type in turn (the first 6 hold one of each type), so that any
    prefix of the validation set is balanced."""
    seen: dict[str, int] = {}
    rank = []
    for g in games:
        seen[g["task_type"]] = seen.get(g["task_type"], 0) + 1
        rank.append(seen[g["task_type"]])
    return [g for _, _, g in sorted(zip(rank, range(len(games)), games, strict=True), key=lambda t: t[:2])]


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows. Only ALFWorld's valid_unseen games ship here, so both splits draw on the same 36:
    "val" takes them one task type after another (:func:`interleaved`; all 36 for the baseline),
    "train" cycles over them in a seeded order."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    games = load_index()
    if split == "val":
        games = interleaved(games)
        if n > len(games):
            raise ValueError(f"there are only {len(games)} games, asked for {n}")
        return [game_row(g, Path(g["gamefile"]).parts[2]) for g in games[:n]]
    random.Random(seed).shuffle(games)
    return [game_row(games[i % len(games)], f"{Path(games[i % len(games)]['gamefile']).parts[2]}-{i // len(games)}")
            for i in range(n)]
