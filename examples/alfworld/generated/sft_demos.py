"""Expert demonstrations on generated training games, replayed through the gateway for ``agentr1 sft``.

Each game's expert commands (:func:`~examples.alfworld.generated.expert.expert_commands`, the
``search`` expert by default: every command follows from what the player has been shown) are replayed
in :class:`~examples.alfworld.generated.env.GeneratedAlfworldEnv`, the environment of the RL rollouts,
one command per assistant turn; the environment reports the win as the outcome (``min_reward: 1``
keeps the won episodes). Only training games are demonstrated: held-out games are never generated
into the training split (see ``data.py``).

    python -m agentr1.trainer.sft.replay examples.alfworld.generated.sft_demos:demonstrations n=600 \\
        --db out/alfgen/traces.db --run-id alfgen-demos
    agentr1 sft examples/alfworld/generated/sft.yaml
"""

from __future__ import annotations

from typing import Any

from examples.alfworld.generated.data import game_row, generated_games
from examples.alfworld.generated.env import GeneratedAlfworldEnv
from examples.alfworld.generated.expert import expert_commands

from agentr1.trainer.sft.replay import Demonstration

__all__ = ["DEMO_SEED", "demonstrations"]

DEMO_SEED = 7  # a data seed of its own: the demonstrated games are training games, not the RL run's first batches


def demonstrations(n: int, seed: int = DEMO_SEED, expert: str = "search", size: str = "small",
                   **env_kwargs: Any) -> list[Demonstration]:
    """Demonstrations of ``n`` training games of data seed ``seed``."""
    out = []
    games = generated_games("train", seed, size)
    for _ in range(n):
        game = next(games)
        row = game_row(game)
        kwargs = {k: v for k, v in row["env_kwargs"].items() if k not in ("max_steps", "sampling")}
        commands = expert_commands(game, expert)
        out.append(Demonstration(task_id=row["id"], env=GeneratedAlfworldEnv(row, **kwargs, **env_kwargs),
                                 actions=[{"role": "assistant", "content": c} for c in commands],
                                 group_id=f"demo/{row['id']}",
                                 metadata={"expert": expert, "game_seed": game.seed, "task_type": game.goal.task_type,
                                           "fingerprint": game.fingerprint}))
    return out
