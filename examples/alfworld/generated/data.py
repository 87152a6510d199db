"""Generated ALFWorld games as Agent-R1 rows: ``make_tasks(split, n, seed)`` for ``data.generator``.

Each split takes only the games :func:`~examples.alfworld.generated.generator.split_of` gives it (a
function of the game's fingerprint), so the training, val and test games never share a game,
whatever the seeds; within a split no game repeats. The task types take turns (any prefix of a split is
balanced over the six), and the training games are unlimited: ask for as many as needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from examples.alfworld.generated.generator import SIZES, TASK_TYPES, GeneratedGame, generate_game

__all__ = ["ENV", "MAX_STEPS", "SAMPLING", "game_row", "generated_games", "make_tasks"]

ENV = "examples.alfworld.generated.env:GeneratedAlfworldEnv"
MAX_STEPS = 20  # the searching expert needs at most 15 commands in small rooms (measured on 300 games)
SAMPLING = {"max_tokens": 24, "temperature": 1.0}
_SEED_STRIDE = 1_000_000  # game seeds of data seed s: s * stride + 0, 1, 2, ...


def generated_games(split: str, seed: int, size: str = "small") -> Iterator[GeneratedGame]:
    """The games of ``split`` for data seed ``seed``, without repeats, task types in turn."""
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', not {split!r}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    seen: set[str] = set()
    turn, tries = 0, 0
    while True:
        task_type = TASK_TYPES[turn % len(TASK_TYPES)]
        game = generate_game(seed * _SEED_STRIDE + tries, task_type, size)
        tries += 1
        if tries >= _SEED_STRIDE:
            raise RuntimeError(f"no new {split} game of type {task_type} in {_SEED_STRIDE} seeds")
        if game.split != split or game.fingerprint in seen:
            continue
        seen.add(game.fingerprint)
        turn += 1
        yield game


def game_row(game: GeneratedGame, *, max_steps: int = MAX_STEPS, sampling: dict[str, Any] | None = None,
             invalid_penalty: float | None = None) -> dict[str, Any]:
    """One Agent-R1 row; the id is the game's fingerprint (the same game has the same id everywhere).
    ``invalid_penalty``: the environment's reward for a reply that is not an admissible command (None: its
    default, -0.1 a step; 0: the outcome alone)."""
    env_kwargs = {"game_seed": game.seed, "task_type": game.goal.task_type, "size": game.size,
                  "fingerprint": game.fingerprint, "max_steps": max_steps, "sampling": dict(sampling or SAMPLING)}
    if invalid_penalty is not None:
        env_kwargs["invalid_penalty"] = float(invalid_penalty)
    return {"id": f"alfgen-{game.fingerprint[:16]}", "data_source": "alfworld_generated", "agent_name": ENV,
            "task_type": game.goal.task_type, "split": game.split,
            "prompt": [{"role": "user", "content": f"Your task is to: {game.task}"}], "env_kwargs": env_kwargs}


def make_tasks(split: str, n: int, seed: int, size: str = "small",
               invalid_penalty: float | None = None) -> list[dict[str, Any]]:
    """``n`` rows of ``split`` ("train", "val" or "test"), generated from data seed ``seed``; ``size`` and
    ``invalid_penalty`` (see :func:`game_row`) come from ``data.generator_kwargs``."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if invalid_penalty is not None and (not isinstance(invalid_penalty, int | float) or invalid_penalty < 0):
        raise ValueError(f"invalid_penalty must be a number >= 0 (a penalty, subtracted), got {invalid_penalty!r}")
    games = generated_games(split, seed, size)
    return [game_row(next(games), invalid_penalty=invalid_penalty) for _ in range(n)]
