"""Tools and tool choice, checked once in the gateway's canonical (OpenAI chat) form.

- A tool's parameters must be a valid JSON Schema (checked with ``jsonschema`` against the schema's own
  draft); a bad one is a 400 naming the tool, at every API.
- ``tool_choice`` naming a function must name an offered one; "required" needs tools.
- A schema nests at most :data:`~agentr1.gateway.limits.MAX_SCHEMA_DEPTH` levels (checked before anything
  recurses over it).
- In a conversation, a tool result answers a call of the assistant turn right before it (OpenAI and Anthropic
  refuse it otherwise): :func:`check_tool_results`.
- Output formats (``response_format``) and forced calls become grammars in :mod:`.constraints`.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from agentr1.gateway.errors import APIError
from agentr1.gateway.limits import MAX_SCHEMA_DEPTH, exceeds_depth

__all__ = ["TOOL_NAME", "check_schema_depth", "check_tool_results", "check_tools", "function_tool",
           "unanswered_result"]

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's and Anthropic's rule for a function's name


def function_tool(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    """A tool in the canonical chat form; only what reaches the prompt, so every API gives the same tools."""
    function: dict[str, Any] = {"name": name}
    if description:
        function["description"] = description
    function["parameters"] = parameters if parameters is not None else {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def check_tools(tools: list[dict[str, Any]] | None, tool_choice: Any, *, param: str = "tools") -> None:
    names = []
    for i, tool in enumerate(tools or []):
        function = tool.get("function") or {}
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise APIError(400, f"{param}[{i}] needs a name", code="invalid_request", param=f"{param}[{i}]")
        if not TOOL_NAME.fullmatch(name):
            raise APIError(400, f"{param}[{i}]: invalid function name {name[:80]!r}: a name is 1 to 64 letters, "
                                "digits, underscores or dashes (^[a-zA-Z0-9_-]{1,64}$)", code="invalid_request",
                           param=f"{param}[{i}].name")
        schema = function.get("parameters", {})
        if not isinstance(schema, dict):
            raise APIError(400, f"{param}[{i}] ({name}): parameters must be a JSON Schema object",
                           code="invalid_request", param=f"{param}[{i}]")
        check_schema_depth(schema, f"{param}[{i}] ({name}): parameters", param=f"{param}[{i}]")
        problem = _schema_problem(json.dumps(schema, sort_keys=True, default=repr))
        if problem is not None:
            raise APIError(400, f"{param}[{i}] ({name}): parameters are not a valid JSON Schema: {problem}",
                           code="invalid_tool_schema", param=f"{param}[{i}]")
        names.append(name)
    if tool_choice == "required" and not names:
        raise APIError(400, "tool_choice 'required' needs tools", code="invalid_request", param="tool_choice")
    named = _named_choice(tool_choice)
    if named is not None and named not in names:
        raise APIError(400, f"tool_choice names {named!r}, which is not among the tools offered ({names})",
                       code="invalid_request", param="tool_choice")
    if isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "required"):
        raise APIError(400, f"tool_choice must be 'auto', 'none', 'required' or a named function, not "
                            f"{tool_choice!r}", code="invalid_request", param="tool_choice")


@lru_cache(maxsize=1024)
def _schema_problem(schema_json: str) -> str | None:
    """What is wrong with a tool's parameter schema (None: valid), by its canonical JSON. An agent sends the
    same tools with every call: checking a schema against its draft's metaschema took about 40% of the
    gateway's chat handler (py-spy, ``bench/rollout_bench.py --job calculator``), so each schema is checked once."""
    schema = json.loads(schema_json)
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return exc.message
    return None


def _named_choice(tool_choice: Any) -> str | None:
    if not isinstance(tool_choice, dict):
        return None
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, dict) else tool_choice.get("name")
    if not isinstance(name, str):
        raise APIError(400, "a named tool_choice needs the function's name", code="invalid_request",
                       param="tool_choice")
    return name



def check_schema_depth(schema: Any, what: str, *, param: str) -> None:
    """A 400 for a schema nested more deeply than :data:`MAX_SCHEMA_DEPTH` (``what`` names it)."""
    if exceeds_depth(schema, MAX_SCHEMA_DEPTH):
        raise APIError(400, f"{what}: the schema nests more than {MAX_SCHEMA_DEPTH} levels deep",
                       code="invalid_tool_schema" if param.startswith("tools") else "invalid_request", param=param)


def unanswered_result(messages: list[dict[str, Any]]) -> tuple[int, Any] | None:
    """The first tool message (its index and ``tool_call_id``) that answers no call of the assistant message
    before it (other tool messages may come between); None when every one answers a call."""
    calls: set[Any] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            calls = {call.get("id") for call in message.get("tool_calls") or ()}
        elif role == "tool":
            if message.get("tool_call_id") not in calls:
                return i, message.get("tool_call_id")
        else:
            calls = set()
    return None


def check_tool_results(messages: list[dict[str, Any]], *, lenient: bool, param: str = "messages") -> None:
    """OpenAI's rule for chat messages: a 400 for a tool message that answers no call of the assistant message
    before it (skipped with the ``lenient_tool_history`` setting)."""
    if lenient or (found := unanswered_result(messages)) is None:
        return
    index, call_id = found
    raise APIError(400, f"{param}[{index}]: a tool message must answer a tool call of the assistant message before "
                        f"it; {call_id!r} is not among its tool_calls", code="invalid_request",
                   param=f"{param}[{index}].tool_call_id")
