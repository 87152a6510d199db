"""The expert walkthroughs shipped in the game files, replayed through the recipe's environment.

``expert_actions`` gives the commands; ``expert_episode`` plays them through :class:`AlfworldEnv`
and returns every observation the model would have seen with the expert's reply to it, which is
what supervised demonstrations (SFT warm starts) need: the same prompts the RL rollouts use.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.alfworld.env import AlfworldEnv, resolve_gamefile


def expert_actions(gamefile: str | Path) -> list[str]:
    """The expert's commands for one game (the file's ``walkthrough``)."""
    data = json.loads(resolve_gamefile(gamefile).read_text(encoding="utf-8"))
    actions = data.get("walkthrough")
    if not isinstance(actions, list) or not actions or not all(isinstance(a, str) for a in actions):
        raise ValueError(f"{gamefile}: the game file has no walkthrough")
    return actions


@dataclass
class ExpertEpisode:
    """``steps[i]``: the observation (chat messages) before the expert's i-th command, and that
    command as the assistant message; ``won`` whether the goal held after the last one."""

    gamefile: str
    steps: list[tuple[list[dict[str, Any]], dict[str, Any]]] = field(default_factory=list)
    won: bool = False


async def aexpert_episode(gamefile: str | Path, **env_kwargs: Any) -> ExpertEpisode:
    env = AlfworldEnv({"id": str(gamefile)}, gamefile=str(gamefile), **env_kwargs)
    episode = ExpertEpisode(gamefile=str(gamefile))
    observation = await env.reset()
    for command in expert_actions(gamefile):
        action = {"role": "assistant", "content": command}
        episode.steps.append((observation, action))
        result = await env.step(action)
        if not result.info["valid"]:
            raise ValueError(f"{gamefile}: the expert command {command!r} is not admissible here")
        observation, episode.won = result.observation, result.info["won"]
    return episode


def expert_episode(gamefile: str | Path, **env_kwargs: Any) -> ExpertEpisode:
    """:func:`aexpert_episode` for synchronous code (not from inside a running event loop)."""
    return asyncio.run(aexpert_episode(gamefile, **env_kwargs))
