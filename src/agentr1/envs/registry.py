"""Names for environments, flows, tools and answer scorers, so a dataset row can pick them.

An Agent-R1 row names its agent with ``agent_name``: a name registered here (``@register_env``,
``@register_flow``) or an import path ``package.module:attr``. Tools named in ``env_kwargs`` and
the answer scorer of a row's ``reward_model`` resolve the same way. Unknown names fail with the
list of what is registered, never silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentr1.core import Registry, UnknownName, load_callable

__all__ = ["ENVS", "FLOWS", "SCORERS", "TOOLS", "Registry", "UnknownName", "import_attr", "register_env",
           "register_flow", "register_scorer", "register_tool", "resolve", "resolve_tool"]

import_attr = load_callable  # ``package.module:attr``, imported (agentr1.core.load_callable)


ENVS: Registry[type] = Registry("environment", import_paths=True)
FLOWS: Registry[type] = Registry("agent flow", import_paths=True)
TOOLS: Registry[type] = Registry("tool", import_paths=True)
SCORERS: Registry[Callable[[str, Any], float]] = Registry("scorer", import_paths=True)


def register_env(name: str) -> Callable[[type], type]:
    """Class decorator: make an :class:`AgentEnv` subclass available as ``agent_name: name``."""
    return ENVS.register(name)


def register_flow(name: str) -> Callable[[type], type]:
    """Class decorator: make an :class:`AgentFlowBase` subclass available as ``agent_name: name``."""
    return FLOWS.register(name)


def register_tool(name: str) -> Callable[[type], type]:
    """Class decorator: make a :class:`BaseTool` subclass available by name in ``env_kwargs["tools"]``."""
    return TOOLS.register(name)


def register_scorer(name: str) -> Callable[[Callable[[str, Any], float]], Callable[[str, Any], float]]:
    """Register ``score(solution_str, ground_truth) -> float`` for rows whose ``reward_model`` names it."""
    return SCORERS.register(name)


def resolve(agent_name: str) -> type:
    """The environment or flow class that ``agent_name`` names (registered name or ``module:attr``)."""
    from agentr1.envs.base import AgentEnv
    from agentr1.envs.flow import AgentFlowBase

    if not isinstance(agent_name, str) or not agent_name:
        raise UnknownName(f"agent_name must be a non-empty string, got {agent_name!r}")
    if agent_name in ENVS.entries:
        return ENVS.entries[agent_name]
    if agent_name in FLOWS.entries:
        return FLOWS.entries[agent_name]
    if ":" not in agent_name:
        raise UnknownName(f"unknown agent_name {agent_name!r}; registered environments: {sorted(ENVS.entries)}, "
                          f"flows: {sorted(FLOWS.entries)} (or give an import path package.module:Class)")
    found = import_attr(agent_name)
    if not (isinstance(found, type) and issubclass(found, AgentEnv | AgentFlowBase)):
        raise UnknownName(f"{agent_name!r} is {found!r}, not an AgentEnv or AgentFlowBase subclass")
    return found


def resolve_tool(spec: str | type | Any) -> Any:
    """A tool instance from a registered name, a ``module:Class`` path, a class or an instance."""
    from agentr1.envs.tools import BaseTool

    found = TOOLS.get(spec) if isinstance(spec, str) else spec
    if isinstance(found, type) and issubclass(found, BaseTool):
        found = found()
    if not isinstance(found, BaseTool):
        raise UnknownName(f"tool {spec!r} is {found!r}, not a BaseTool subclass or instance")
    return found
