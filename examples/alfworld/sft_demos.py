"""The expert walkthroughs shipped with the ALFWorld games as stored demonstration sessions.

Each game's walkthrough (:func:`examples.alfworld.walkthrough.expert_actions`) is replayed through
the gateway in :class:`~examples.alfworld.env.AlfworldEnv` (the environment the RL rollouts use, so
the demonstrations see the same prompts), one command per assistant turn, as the policy's tokens.
The environment reports its success outcome and penalties as in RL, so ``min_reward: 1`` keeps the
won episodes:

    python -m agentr1.trainer.sft.replay examples.alfworld.sft_demos:demonstrations n=24 \
        --db out/alfworld/traces.db --run-id alfworld-demos
    agentr1 sft examples/calculator/sft.yaml data.db=sqlite:///out/alfworld/traces.db \
        'data.run_ids=[alfworld-demos]' trainer.default_local_dir=out/alfworld-sft

Only the 24 training games are demonstrated (``n`` takes them in :func:`~examples.alfworld.data.make_tasks`' seeded
training order): the 6 val and 6 test games stay held out.
"""

from __future__ import annotations

from typing import Any

from examples.alfworld.data import make_tasks, split_games
from examples.alfworld.env import AlfworldEnv
from examples.alfworld.walkthrough import expert_actions

from agentr1.trainer.sft.replay import Demonstration


def demonstrations(n: int = 24, seed: int = 0, **env_kwargs: Any) -> list[Demonstration]:
    """Demonstrations of the first ``n`` training games (at most all 24) in the training order."""
    rows = make_tasks("train", min(n, len(split_games("train"))), seed)
    out = []
    for row in rows:
        gamefile = row["env_kwargs"]["gamefile"]
        out.append(Demonstration(task_id=row["id"], env=AlfworldEnv(row, gamefile=gamefile, **env_kwargs),
                                 actions=[{"role": "assistant", "content": c} for c in expert_actions(gamefile)],
                                 group_id=f"demo/{row['id']}", metadata={"gamefile": gamefile}))
    return out
