"""``agentr1.envs:run_task``: the trainer's agent entrypoint for Agent-R1 dataset rows.

A row (``prompt``, ``agent_name``, ``reward_model``, ``env_kwargs``, as in Agent-R1's parquet files)
picks its environment or flow by ``agent_name`` and builds it with ``env_kwargs``. Two keys of
``env_kwargs`` configure the loop rather than the environment: ``max_steps`` and ``sampling``
(``chat.completions`` parameters such as ``temperature``, ``max_tokens``).

Rewards: the loop puts each step's environment reward (tool rewards, process rewards) on its step.
The row's ``reward_model`` (``{"style": "rule", "ground_truth": ..., "scorer": ...}``) scores the
final answer; that score is what ``run_task`` returns, so the trainer records it as the session's
outcome. Environment step rewards are never also returned, so nothing is counted twice.
"""

from __future__ import annotations

import json
from typing import Any

from agentr1.envs.base import AgentEnv
from agentr1.envs.flow import AgentFlowBase
from agentr1.envs.loop import AgentEnvLoop, Episode
from agentr1.envs.registry import SCORERS, resolve

DEFAULT_MAX_STEPS = 8


def env_kwargs_of(task: dict[str, Any]) -> dict[str, Any]:
    """The row's ``env_kwargs`` as a dict (parquet may hand a JSON string; parquet structs fill keys
    that other rows have with None, which mean "not set" and are dropped)."""
    raw = task.get("env_kwargs")
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"task {task.get('id', '?')!r}: env_kwargs is not valid JSON: {exc.msg}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"task {task.get('id', '?')!r}: env_kwargs must be a mapping, got {raw!r}")
    return {k: v for k, v in raw.items() if v is not None}


def score_answer(task: dict[str, Any], answer: str) -> float | None:
    """The row's ``reward_model`` score of the final answer, or None when the row has no reward_model."""
    reward_model = task.get("reward_model")
    if reward_model is None:
        return None
    if not isinstance(reward_model, dict) or reward_model.get("style", "rule") != "rule":
        raise ValueError(f"task {task.get('id', '?')!r}: only reward_model style 'rule' is scored here, "
                         f"got {reward_model!r} (score model-judged rows with reward.functions)")
    scorer = reward_model.get("scorer") or task.get("data_source")
    if not scorer:
        raise ValueError(f"task {task.get('id', '?')!r}: reward_model needs a `scorer` (registered name or "
                         "module:function) or the row a `data_source` naming one")
    return float(SCORERS.get(scorer)(answer, reward_model.get("ground_truth")))


def final_answer(episode: Episode) -> str:
    return str((episode.last_action or {}).get("content") or "")


async def run_task(task: dict[str, Any]) -> float | None:
    """Run the row's environment (through :class:`AgentEnvLoop`) or flow inside the current session;
    return the episode reward (the ``reward_model`` score, or what the flow returns)."""
    kwargs = env_kwargs_of(task)
    cls = resolve(task.get("agent_name"))  # type: ignore[arg-type]
    if issubclass(cls, AgentFlowBase):
        return await cls(**kwargs).run(task)
    assert issubclass(cls, AgentEnv)
    max_steps = kwargs.pop("max_steps", DEFAULT_MAX_STEPS)
    sampling = kwargs.pop("sampling", {})
    episode = await AgentEnvLoop(cls(task, **kwargs), max_steps, **sampling).run()
    return score_answer(task, final_answer(episode))
