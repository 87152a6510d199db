"""Names for environments, flows, tools and answer scorers, so a dataset row can pick them.

An Agent-R1 row names its agent with ``agent_name``: a name registered here (``@register_env``,
``@register_flow``) or an import path ``package.module:attr``. Tools named in ``env_kwargs`` and
the answer scorer of a row's ``reward_model`` resolve the same way. Unknown names fail with the
list of what is registered, never silently.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(LookupError):
    """A name that is neither registered nor an importable ``module:attr``."""


def import_attr(spec: str) -> Any:
    """``package.module:attr``, imported (modules of the working directory count, like pytest and uvicorn)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UnknownName(f"{spec!r} is not a module:attr path")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownName(f"cannot import {module_name!r} for {spec!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UnknownName(f"module {module_name!r} has no {attr!r}") from None


class Registry(Generic[T]):
    """Name -> object, for one kind of thing (``kind`` names it in errors)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if self.entries.get(name, obj) is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered: {self.entries[name]!r}")
            self.entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        """The registered ``name``, or the object at the import path ``module:attr``."""
        if name in self.entries:
            return self.entries[name]
        if ":" in name:
            return import_attr(name)
        raise UnknownName(f"unknown {self.kind} {name!r}; registered: {sorted(self.entries)} "
                          "(or give an import path package.module:attr)")


ENVS: Registry[type] = Registry("environment")
FLOWS: Registry[type] = Registry("agent flow")
TOOLS: Registry[type] = Registry("tool")
SCORERS: Registry[Callable[[str, Any], float]] = Registry("scorer")


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
