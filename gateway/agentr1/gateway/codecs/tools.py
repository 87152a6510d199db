"""Tools and tool choice, checked once in the gateway's canonical (OpenAI chat) form.

- A tool's parameters must be a valid JSON Schema (checked with ``jsonschema`` against the schema's own
  draft); a bad one is a 400 naming the tool, at every API.
- ``tool_choice`` naming a function must name an offered one; "required" needs tools.
- Output formats (``response_format``) and forced calls become grammars in :mod:`.constraints`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from agentr1.gateway.errors import APIError

__all__ = ["check_tools", "function_tool"]


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
        schema = function.get("parameters", {})
        if not isinstance(schema, dict):
            raise APIError(400, f"{param}[{i}] ({name}): parameters must be a JSON Schema object",
                           code="invalid_request", param=f"{param}[{i}]")
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

