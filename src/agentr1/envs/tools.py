"""Tools for environments: :class:`BaseTool`, its :class:`ToolResult`, and running a model's tool calls.

A tool is named, described and typed by a JSON schema, exactly what the OpenAI ``tools`` parameter
carries, so the model sees the same tool whether an environment or a plain OpenAI agent offers it.
The tool calls of one model turn run concurrently (``asyncio.gather``): a turn that calls three
slow tools waits for the slowest, not for the sum.

A tool that raises is feedback for the model (``error: ...`` in the tool message), unless the error is
an infrastructure failure (a connection error or timeout of the tool server, or
:class:`~agentr1.sdk.failures.EnvironmentFailure`): that ends the episode as an ``environment``
failure, so the trainer never trains the session as if the model had failed.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentr1.sdk import EnvironmentFailure, is_infrastructure_error


@dataclass
class ToolResult:
    """What a tool hands back: the text the model reads, an optional reward for this call, and
    free-form ``info`` kept for the environment (never shown to the model)."""

    content: str
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


class BaseTool(ABC):
    """One tool: ``name``, ``description`` and ``parameters`` (a JSON schema of the arguments
    object) as class attributes, and an async :meth:`execute`."""

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    @abstractmethod
    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        """Run the tool on already-decoded, already-checked arguments."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def check_arguments(self, arguments: Any) -> str | None:
        """Why ``arguments`` do not fit :attr:`parameters` (an object with its required keys), or None."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        missing = [key for key in self.parameters.get("required", []) if key not in arguments]
        return f"missing required argument(s) {missing}" if missing else None


@dataclass
class ToolCallOutcome:
    """One executed tool call: the tool message for the model and what the environment keeps."""

    message: dict[str, Any]  # {"role": "tool", "tool_call_id": ..., "content": ...}
    result: ToolResult
    tool: str
    error: str | None = None  # set when the call could not run (unknown tool, bad arguments, tool raised)


def _decode_arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        return json.loads(raw) if raw.strip() else {}
    return raw


async def _run_one(call: dict[str, Any], tools: dict[str, BaseTool]) -> ToolCallOutcome:
    function = call.get("function") or {}
    name = str(function.get("name", ""))
    error: str | None = None
    result: ToolResult | None = None
    tool = tools.get(name)
    if tool is None:
        error = f"unknown tool {name!r}; available tools: {sorted(tools)}"
    else:
        try:
            arguments = _decode_arguments(function.get("arguments"))
        except json.JSONDecodeError as exc:
            error = f"arguments of {name} are not valid JSON ({exc.msg})"
        else:
            error = tool.check_arguments(arguments)
            if error is None:
                try:
                    result = await tool.execute(arguments)
                except Exception as exc:
                    if is_infrastructure_error(exc):  # the tool server is down, not the model's fault: end the episode
                        raise EnvironmentFailure(f"tool {name} is unavailable: {type(exc).__name__}: {exc}") from exc
                    error = f"{name} failed: {type(exc).__name__}: {exc}"  # feedback for the model
                else:
                    if not isinstance(result, ToolResult):
                        raise TypeError(f"{type(tool).__name__}.execute must return a ToolResult, got {result!r}")
    if result is None:
        result = ToolResult(content=f"error: {error}", info={"error": error})
    message = {"role": "tool", "tool_call_id": str(call.get("id", "")), "content": result.content}
    return ToolCallOutcome(message=message, result=result, tool=name, error=error)


async def run_tool_calls(tool_calls: Sequence[dict[str, Any]], tools: Sequence[BaseTool]) -> list[ToolCallOutcome]:
    """Execute the OpenAI-format ``tool_calls`` of one assistant message concurrently; the outcomes
    come back in the order of the calls, so the tool messages follow the calls one to one."""
    by_name = {tool.name: tool for tool in tools}
    return list(await asyncio.gather(*(_run_one(call, by_name) for call in tool_calls)))
