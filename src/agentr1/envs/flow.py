"""AgentFlowBase: for agents with their own control flow (branching, sub-agents, planners).

An environment loop fixes the control flow (observe, act, step); a flow writes it by hand. Its model
calls still go through an OpenAI client of the current agentr1 session (:meth:`client`), so they are
ordinary recorded steps like any other agent's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from agentr1.sdk import areward, async_openai_client


class AgentFlowBase(ABC):
    """Subclass, implement :meth:`run`, and register it with ``@register_flow("name")``.
    Built as ``FlowClass(**env_kwargs)``; ``run(task)`` returns the episode reward (or None when it
    reported its rewards itself)."""

    def __init__(self, **env_kwargs: Any) -> None:
        self.env_kwargs = env_kwargs

    @abstractmethod
    async def run(self, task: dict[str, Any]) -> float | None:
        """Solve ``task``; use :meth:`client` for model calls."""

    def client(self, **kwargs: Any) -> Any:
        """An ``openai.AsyncOpenAI`` client bound to the current session; like AgentEnvLoop's, it does
        not retry by default (a retried call would be recorded as a second step)."""
        return async_openai_client(**{"max_retries": 0, "timeout": 3600.0, **kwargs})

    async def reward(self, value: float, *, step: int | str | None = "last", name: str = "flow") -> None:
        """Report an environment reward on a step (default: the newest) or, with ``step=None``, the session."""
        await areward(value, name=name, step=step, source="environment")
