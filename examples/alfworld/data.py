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
    """The games task type by task type in turn (the first 6 hold one of each type, the next 6 the second of each,
    ...), so that any prefix of a held-out split is balanced."""
    seen: dict[str, int] = {}
    rank = []
    for g in games:
        seen[g["task_type"]] = seen.get(g["task_type"], 0) + 1
        rank.append(seen[g["task_type"]])
    return [g for _, _, g in sorted(zip(rank, range(len(games)), games, strict=True), key=lambda t: t[:2])]


# disjoint index ranges of the interleaved games: each task type's first game is val's, its second test's, its other
# four training's. The 36 games are 36 different tasks (task type, object, receptacle and room), one trial each.
SPLIT_GAMES = {"val": range(0, 6), "test": range(6, 12), "train": range(12, 36)}


def game_id(entry: dict[str, Any]) -> str:
    """The game's task folder, e.g. ``look_at_obj_in_light-AlarmClock-None-DeskLamp-308``."""
    return Path(entry["gamefile"]).parts[2]


def split_games(split: str) -> list[dict[str, Any]]:
    """The shipped games of ``split`` (:data:`SPLIT_GAMES`), interleaved by task type."""
    if split not in SPLIT_GAMES:
        raise ValueError(f"split must be one of {tuple(SPLIT_GAMES)}, not {split!r}")
    games = interleaved(load_index())
    return [games[i] for i in SPLIT_GAMES[split]]


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows of ``split``: "val" and "test" take their 6 games (one of each task type) in order, "train" cycles
    over its 24 in a seeded order. No game is in two splits."""
    games = split_games(split)
    if split != "train":
        if n > len(games):
            raise ValueError(f"there are only {len(games)} {split} games, asked for {n}")
        return [game_row(g, game_id(g)) for g in games[:n]]
    random.Random(seed).shuffle(games)
    return [game_row(games[i % len(games)], f"{game_id(games[i % len(games)])}-{i // len(games)}") for i in range(n)]
