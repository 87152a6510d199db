"""The tool-call parsers by name, and the one each model family gets by default.

Like vLLM's and SGLang's ``--tool-call-parser``: a model's completions are read by the parser of its
family, and ``--tool-call-parser NAME`` (gateway flag, ``GatewaySettings.tool_call_parser``, the trainer's
``actor_rollout_ref.rollout.tool_call_parser``) overrides it. Parsers:

- ``hermes``: ``<tool_call>`` tags (Qwen2.5, Qwen3, Hermes, our SmolLM2 template). The default.
- ``json`` (alias ``llama3_json``): bare or fenced JSON naming a declared function (Llama 3.1/3.2).
- ``pythonic``: ``[f(a=1), g(b="x")]`` of declared functions (Llama 3.2 / 4 with a pythonic template).
- ``hermes_json``: the tags, else bare or fenced JSON (Qwen2.5-Coder-Instruct writes its calls as JSON,
  although its template asks for tags; and the Qwen2 architecture, whose checkpoints keep no model name).

:func:`register_tool_call_parser` adds a format; names not registered fail listing the valid ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentr1.core.rendering.call_parsing import FoundCalls, ToolCallParser
from agentr1.core.rendering.hermes import HERMES
from agentr1.core.rendering.json_calls import JSON
from agentr1.core.rendering.pythonic_calls import PYTHONIC

__all__ = [
    "TOOL_CALL_PARSERS",
    "FirstFound",
    "default_tool_call_parser",
    "family_tool_call_parser",
    "get_tool_call_parser",
    "register_tool_call_parser",
    "use_tool_call_parser",
]


class FirstFound:
    """Several formats tried in order: the first that finds a call reads the turn (blocks an earlier format
    could not parse stay listed as invalid while they remain in the content)."""

    def __init__(self, name: str, parsers: Sequence[ToolCallParser]) -> None:
        self.name = name
        self.parsers = tuple(parsers)
        self.markers = tuple(dict.fromkeys(m for p in self.parsers for m in p.markers))

    def find_calls(self, text: str, tool_names: frozenset[str]) -> FoundCalls:
        invalid: list[str] = []
        first: FoundCalls | None = None
        for parser in self.parsers:
            found = parser.find_calls(text, tool_names)
            if found.calls:
                found.invalid = [*(block for block in invalid if block in found.text), *found.invalid]
                return found
            invalid.extend(found.invalid)
            first = first or found
        return first if first is not None else FoundCalls(text)


HERMES_JSON = FirstFound("hermes_json", (HERMES, JSON))

TOOL_CALL_PARSERS: dict[str, ToolCallParser] = {p.name: p for p in (HERMES, JSON, PYTHONIC, HERMES_JSON)}
_ALIASES = {"llama3_json": "json"}  # vLLM's names for the same format

# (a pattern over the model's names, lower case; the parser), the first match wins
FAMILY_PARSERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"qwen2(\.5)?[-_ ]?coder"), "hermes_json"),
    (re.compile(r"qwen"), "hermes"),
    (re.compile(r"llama[-_ ]?3"), "json"),
)
# a checkpoint's directory carries no model name: its architecture decides (config.json's model_type)
MODEL_TYPE_PARSERS = {"qwen2": "hermes_json"}
DEFAULT_PARSER = "hermes"


def register_tool_call_parser(parser: ToolCallParser, *, replace: bool = False) -> None:
    """Make ``parser`` available under ``parser.name`` (to ``--tool-call-parser`` and the defaults)."""
    if not isinstance(parser, ToolCallParser):
        raise TypeError("a tool-call parser needs `name`, `markers` and `find_calls(text, tool_names)`")
    if not replace and (parser.name in TOOL_CALL_PARSERS or parser.name in _ALIASES):
        raise ValueError(f"a tool-call parser named {parser.name!r} is registered already")
    TOOL_CALL_PARSERS[parser.name] = parser


def get_tool_call_parser(name: str) -> ToolCallParser:
    """The parser registered as ``name`` (or one of its aliases); unknown names fail listing the valid ones."""
    parser = TOOL_CALL_PARSERS.get(_ALIASES.get(name, name))
    if parser is None:
        valid = sorted({*TOOL_CALL_PARSERS, *_ALIASES})
        raise ValueError(f"unknown tool-call parser {name!r}: use one of {', '.join(valid)}")
    return parser


def family_tool_call_parser(names: Sequence[str], model_type: str | None = None) -> str:
    """The default parser of the family that ``names`` (model names; of a path, its last part) or ``model_type``
    point to."""
    last_parts = [Path(str(name)).name.lower() for name in names if name]
    for pattern, parser in FAMILY_PARSERS:
        if any(pattern.search(part) for part in last_parts):
            return parser
    return MODEL_TYPE_PARSERS.get(str(model_type), DEFAULT_PARSER)


def default_tool_call_parser(tokenizer: Any, *names: str) -> str:
    """The default parser for the model ``tokenizer`` belongs to: from its name or directory (and ``names``,
    e.g. the ``--model`` given) or the model name its ``config.json`` keeps, else from the config's
    ``model_type``."""
    path = str(getattr(tokenizer, "name_or_path", "") or "")
    config: dict[str, Any] = {}
    if path and (Path(path) / "config.json").is_file():
        try:
            config = json.loads((Path(path) / "config.json").read_text())
        except (OSError, ValueError):
            config = {}
    # a GGUF's conversion keeps the model's name in ``_model_name_or_path`` ("Qwen2.5 Coder 0.5B Instruct AWQ"),
    # and checkpoints copy the config
    candidates = [*names, path, *(str(config.get(key) or "") for key in ("_model_name_or_path", "_name_or_path"))]
    return family_tool_call_parser(candidates, config.get("model_type"))


def use_tool_call_parser(renderer: Any, name: str) -> Any:
    """Make ``renderer`` read completions with the parser ``name``; returns the renderer. Renderers that parse
    token ids themselves (the ``renderers`` package's) have no text-level parser to replace."""
    parser = get_tool_call_parser(name)
    if not hasattr(renderer, "tool_parser"):
        raise ValueError(f"{type(renderer).__name__} parses tool calls itself: --tool-call-parser needs a text "
                         "renderer (chatml or template)")
    renderer.tool_parser = parser
    return renderer
