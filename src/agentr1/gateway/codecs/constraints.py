"""Output constraints of every API as one :class:`GrammarSpec`: constrained decoding, not after-the-fact checks.

- ``response_format`` (chat) / ``text.format`` (Responses): ``text`` is free; ``json_object`` is any JSON
  object and ``json_schema`` a JSON value valid against its ``schema`` (strict or not: the output always
  validates); any other type is a 400 in the API's own error shape. A schema that is not valid JSON Schema,
  or that the grammar compiler cannot express, is a 400 too. A backend that cannot constrain its sampling
  (``accepts_grammar`` False: the external LiteLLM models, the scripted test backends) answers 400
  ``unsupported_response_format`` rather than ignoring the request.
- ``tool_choice`` "required" or a named function (chat, Responses, Anthropic's ``any`` / ``tool``): the
  renderer's prefill opens the call (``<tool_call>\\n`` for Hermes formats; a named choice also fixes the
  name) and :func:`tool_call_grammar` constrains the rest of it: the function's name among those offered,
  arguments valid against the function's ``parameters``, the closing tag, then the end of the turn. One
  call per turn; with ``parallel_tool_calls`` set true (Anthropic: ``disable_parallel_tool_use`` set false),
  up to :data:`MAX_PARALLEL_CALLS` (the named function again, or any offered one). Renderers whose call syntax is not Hermes' get no grammar (their calls are checked after
  sampling, 422 ``tool_choice_not_satisfied``, see ``model_call``).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from agentr1.core.generation import GrammarSpec
from agentr1.core.rendering import hermes_prefill
from agentr1.gateway.backends.base import Backend
from agentr1.gateway.codecs.tools import check_schema_depth
from agentr1.gateway.errors import APIError

__all__ = ["response_format_grammar", "tool_call_grammar"]

CALL_END = "}\n</tool_call>"  # after the arguments object: the call's JSON closes, then the Hermes tag
NEXT_CALL = "\n<tool_call>\n"  # between two calls, as the chat templates write them
MAX_PARALLEL_CALLS = 8  # the calls of one forced turn with parallel_tool_calls


def _canonical(schema: dict[str, Any]) -> str:
    return json.dumps(schema, ensure_ascii=False)


@functools.lru_cache(maxsize=256)
def _buildable(spec: GrammarSpec) -> str | None:
    """Why the grammar of ``spec`` cannot be built (None: it can); cached per spec."""
    from agentr1.engine import build_grammar  # (the engine's grammar module loads torch: only for a grammar)

    try:
        build_grammar(spec)
    except ValueError as exc:
        return str(exc)
    return None


def response_format_grammar(backend: Backend, fmt: Any, *, param: str = "response_format") -> GrammarSpec | None:
    """The grammar that ``response_format`` / ``text.format`` asks for (None: free text), or a 400."""
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind not in ("json_object", "json_schema"):
        raise APIError(400, f"{param}.type must be 'text', 'json_object' or 'json_schema', not {kind!r}",
                       code="invalid_request", param=param)
    spec = GrammarSpec("json_object")
    if kind == "json_schema":
        inner = fmt.get("json_schema", fmt)  # chat nests it; Responses' text.format holds it directly
        schema = inner.get("schema") if isinstance(inner, dict) else None
        if not isinstance(schema, dict):
            raise APIError(400, f"{param}: json_schema needs a 'schema' object", code="invalid_request", param=param)
        check_schema_depth(schema, param, param=param)
        try:
            validator_for(schema).check_schema(schema)
        except SchemaError as exc:
            raise APIError(400, f"{param}: not a valid JSON Schema: {exc.message}", code="invalid_request",
                           param=param) from None
        spec = GrammarSpec("json_schema", _canonical(schema))
    if not backend.accepts_grammar:
        raise APIError(400, f"{param} {kind!r} needs constrained decoding, which the {backend.name} backend does not "
                            "offer; leave it out (or use 'text') and validate the output in the agent",
                       code="unsupported_response_format", param=param)
    problem = _buildable(spec)
    if problem is not None:
        raise APIError(400, f"{param}: {problem}", code="invalid_request", param=param)
    return spec


def tool_call_grammar(tools: list[dict[str, Any]] | None, tool_choice: Any, prefill: str, *,
                      parallel: bool = False) -> GrammarSpec | None:
    """The grammar of the rest of a forced Hermes tool call, after ``prefill`` (the opening the prompt already
    holds), and with ``parallel`` of the calls that may follow it; None when the call is not forced or the
    renderer does not write Hermes calls."""
    if not tools or not prefill or not (tool_choice == "required" or isinstance(tool_choice, dict)):
        return None
    if prefill != hermes_prefill(tools, tool_choice):
        return None  # another family's call syntax: not constrained here
    functions = [t["function"] for t in tools]
    if isinstance(tool_choice, dict):  # the prefill wrote the name and `"arguments":`; the model samples ' {'
        name = (tool_choice.get("function") or {}).get("name", tool_choice.get("name"))
        functions = [f for f in functions if f["name"] == name][:1]
        alternatives = tuple((" ", _canonical(_parameters(f)), CALL_END) for f in functions)
    else:
        alternatives = _whole_calls(functions, "")
    more = _whole_calls(functions, NEXT_CALL) if parallel else ()
    spec = GrammarSpec("tagged_json", alternatives=alternatives, more=more,
                       max_more=MAX_PARALLEL_CALLS - 1 if parallel else 0)
    problem = _buildable(spec)
    if problem is not None:
        raise APIError(400, f"tools: cannot constrain the forced tool call: {problem}", code="invalid_tool_schema",
                       param="tools")
    return spec


def _whole_calls(functions: list[dict[str, Any]], before: str) -> tuple[tuple[str, str, str], ...]:
    """One call of any of ``functions``, its name included, after ``before``."""
    return tuple((before + '{"name": ' + json.dumps(f["name"], ensure_ascii=False) + ', "arguments": ',
                  _canonical(_parameters(f)), CALL_END) for f in functions)


def _parameters(function: dict[str, Any]) -> dict[str, Any]:
    params = function.get("parameters")
    return params if isinstance(params, dict) else {"type": "object", "properties": {}}
