"""The ALFWorld environment on a generated game: :class:`~examples.alfworld.env.AlfworldEnv` (same prompt,
context window, rewards and command parsing) whose game is rebuilt from its seed instead of read from a file.

A row names its game by ``game_seed``, ``task_type`` and ``size`` (generation is deterministic), plus the
game's ``fingerprint``: when the generator would now build a different game for that seed (its code
changed), the episode stops with an error instead of playing another game than the row means.
"""

from __future__ import annotations

from typing import Any

from examples.alfworld.env import AlfworldEnv
from examples.alfworld.game import AlfredGame
from examples.alfworld.generated.generator import GeneratedGame, generate_game

from agentr1.envs import register_env

__all__ = ["GeneratedAlfworldEnv"]


@register_env("alfworld_generated")
class GeneratedAlfworldEnv(AlfworldEnv):
    """``GeneratedAlfworldEnv(task, game_seed=..., task_type=..., size="small", fingerprint=None, ...)``."""

    def __init__(self, task: dict[str, Any], *, game_seed: int, task_type: str, size: str = "small",
                 fingerprint: str | None = None, keep_last_turns: int = 3, invalid_penalty: float = 0.1,
                 success_reward: float = 1.0) -> None:
        self.generated: GeneratedGame = generate_game(game_seed, task_type, size)
        if fingerprint is not None and fingerprint != self.generated.fingerprint:
            raise ValueError(f"task {task.get('id', '?')!r}: game seed {game_seed} ({task_type}, {size}) now makes "
                             f"game {self.generated.fingerprint[:12]}, not the row's {fingerprint[:12]} (the generator "
                             "changed since the row was made: make the rows again)")
        self.gamefile = None  # type: ignore[assignment]
        self._configure(task, keep_last_turns, invalid_penalty, success_reward)

    def load_game(self) -> AlfredGame:
        return self.generated.game()
