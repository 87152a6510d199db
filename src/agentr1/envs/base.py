"""The environment interface: :class:`AgentEnv` and the :class:`StepResult` of one step.

An environment owns the episode's structured history and decides what the model sees: ``reset``
gives the first messages, and each ``step`` takes the assistant message the model produced and
returns the whole next observation, built from that history (append-only, a sliding window, a
summary: the environment's choice, Agent-R1's ``o_{t+1} = C(z_0..z_t)``). ``anchor`` names the
state for GiGPO's step groups.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from agentr1.envs.tools import BaseTool


@dataclass
class StepResult:
    """One environment step: the next observation (OpenAI chat messages), its reward, whether the
    episode is over, and free-form info."""

    observation: list[dict[str, Any]]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class AgentEnv(ABC):
    """A multi-step environment driven by a policy through the gateway (see :class:`AgentEnvLoop`).

    Built as ``EnvClass(task, **env_kwargs)`` from a dataset row and its ``env_kwargs``.
    """

    tools: list[BaseTool] = []

    def __init__(self, task: dict[str, Any], **env_kwargs: Any) -> None:
        if env_kwargs:
            raise TypeError(f"{type(self).__name__} takes no env_kwargs, got {sorted(env_kwargs)}")
        self.task = task

    @abstractmethod
    async def reset(self) -> list[dict[str, Any]]:
        """Start the episode; the chat messages the model sees first."""

    @abstractmethod
    async def step(self, action: dict[str, Any]) -> StepResult:
        """Apply the assistant message ``action`` (``content``, optional ``tool_calls``)."""

    def anchor(self) -> str | None:
        """The GiGPO anchor of the current state: a text that is equal exactly when two episodes of the
        task are in the same state (the calculator's intermediate value, ALFWorld's observation text).
        Asked before each model call; the loop records it on that call's step
        (:func:`agentr1.sdk.aanchor`). None (the default): the trainer falls back to a hash of the
        step's observation token ids."""
        return None

    async def close(self) -> None:
        """Release what the environment holds (sandboxes, browsers, ...). Called once per episode."""
        return None
