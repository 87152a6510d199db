"""Assistant text -> :class:`~agentr1.core.rendering.base.ParsedAction`, through a tool-call parser.

Models write tool calls in the format of their family: Qwen2.5 and Hermes in ``<tool_call>`` tags,
Qwen2.5-Coder and Llama 3 as bare or fenced JSON, Llama 3.2 / 4 as a Python list of calls. A
:class:`ToolCallParser` finds the calls of one format in the text of a turn (reasoning already taken
out); :func:`parse_text` does what every format shares: split ``<think>`` reasoning, name the calls
(``call_<24 hex>``), strip the format's whitespace from the content. The parsers live in their own
modules (``hermes``, ``json_calls``, ``pythonic_calls``); the registry and the defaults per model
family in :mod:`agentr1.core.rendering.tool_parsers`.

Parsers work on decoded text and never touch token ids: a step stores the ids the model sampled,
and the parsed calls only describe them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentr1.core.rendering.base import ParsedAction, Tool, new_call_id, tool_functions

__all__ = [
    "THINK_CLOSE",
    "THINK_OPEN",
    "FoundCalls",
    "ToolCallParser",
    "call_objects",
    "declared_names",
    "parse_text",
    "split_reasoning",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(slots=True)
class FoundCalls:
    """What a parser found in a turn's text: ``text`` is the text with the calls taken out (the content),
    ``calls`` the ``(function name, arguments as JSON text)`` pairs in order, ``invalid`` the raw text of
    blocks written in the format's call syntax that did not parse (they stay in ``text``)."""

    text: str
    calls: list[tuple[str, str]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


@runtime_checkable
class ToolCallParser(Protocol):
    """One tool-call format. ``name``: what ``--tool-call-parser`` takes and what a step records;
    ``markers``: the text a call in this format may begin with (a stream holds the text back from there
    until the turn ends, so streamed and whole answers agree)."""

    name: str
    markers: tuple[str, ...]

    def find_calls(self, text: str, tool_names: frozenset[str]) -> FoundCalls:
        """The calls in ``text``; ``tool_names``: the functions the request declared (empty: none)."""
        ...


def declared_names(tools: Sequence[Tool] | None) -> frozenset[str]:
    """The function names of OpenAI tools (empty when none are offered)."""
    return frozenset(fn["name"] for fn in tool_functions(tools))


def call_objects(value: Any) -> list[tuple[str, str]] | None:
    """``{"name", "arguments" | "parameters"}`` (or a non-empty list of them) -> the ``(name, arguments JSON)``
    pairs; None when ``value`` is not that. Arguments must be an object (a JSON string of one is accepted:
    some models double-encode); missing arguments are ``{}``."""
    items = value if isinstance(value, list) and value else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict):
            return None
        name = item.get("name")
        arguments = item.get("arguments", item.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            return None
        calls.append((name, json.dumps(arguments, ensure_ascii=False)))
    return calls


def split_reasoning(text: str) -> tuple[str | None, str, bool]:
    """``<think>R</think>C`` -> (R, C, True). Also when the opening tag was in the prompt (text
    starts inside the reasoning). An unclosed ``<think>`` at the start -> (R, "", True). No reasoning
    -> (None, text, False)."""
    stripped = text.lstrip()
    if THINK_CLOSE in text and (stripped.startswith(THINK_OPEN) or THINK_OPEN not in text):
        reasoning, _, rest = text.partition(THINK_CLOSE)
        reasoning = reasoning.lstrip()
        if reasoning.startswith(THINK_OPEN):
            reasoning = reasoning[len(THINK_OPEN):]
        return reasoning.strip() or None, rest, True
    if stripped.startswith(THINK_OPEN):
        return stripped[len(THINK_OPEN):].strip() or None, "", True
    return None, text, False


def parse_text(text: str, parser: ToolCallParser, tools: Sequence[Tool] | None = None, *,
               id_seed: str | None = None, finished: bool = True) -> ParsedAction:
    """Decoded assistant text (end-of-turn token already removed) -> :class:`ParsedAction`, the calls found
    by ``parser`` (``tools``: the request's, for the formats that only read calls of declared functions).

    Content is stripped of surrounding whitespace when tool calls or reasoning were taken out of it
    (the newlines around a call are format, not content); ``None`` when only tool calls remain."""
    reasoning, rest, had_reasoning = split_reasoning(text)
    found = parser.find_calls(rest, declared_names(tools))
    tool_calls = [{"id": new_call_id(id_seed, i), "type": "function", "function": {"name": name, "arguments": args}}
                  for i, (name, args) in enumerate(found.calls)]
    text_left = found.text
    if tool_calls or had_reasoning:
        text_left = text_left.strip()
    content = None if tool_calls and not text_left else text_left
    return ParsedAction(content=content, tool_calls=tool_calls, reasoning=reasoning, invalid_tool_calls=found.invalid,
                        finished=finished, parser=parser.name)
