"""Hermes-style tool calls and ``<think>`` reasoning, at the text level.

Hermes format (Qwen2.5, NousResearch Hermes, our SmolLM2 template)::

    <tool_call>
    {"name": "calc", "arguments": {"expression": "12*7"}}
    </tool_call>

The parser works on decoded text, not on token ids: in SmolLM2's vocabulary ``<tool_call>`` is five
ordinary tokens, so an id-level matcher (``renderers``' qwen3 parser) finds nothing. It is tolerant:
a block whose JSON does not parse, or that has no function name, stays in ``content`` verbatim and
is listed in ``invalid_tool_calls``; nothing raises. Renderers built on :class:`HermesTextRenderer`
read completions with the tool-call parser of the model's family (:mod:`agentr1.core.rendering.tool_parsers`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agentr1.core.rendering.base import ParsedAction, TextRenderer, Tool, tool_choice_name
from agentr1.core.rendering.call_parsing import (
    FoundCalls,
    ToolCallParser,
    call_objects,
    parse_text,
    split_reasoning,
)

__all__ = [
    "HERMES",
    "TOOLS_FOOTER",
    "TOOLS_HEADER",
    "HermesParser",
    "HermesTextRenderer",
    "hermes_prefill",
    "parse_hermes",
    "split_reasoning",
    "tools_block",
]

TOOLS_HEADER = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)(?:" + re.escape(CALL_CLOSE) + r"|\Z)", re.DOTALL)


def tools_block(tools: Sequence[Tool]) -> str:
    """The text appended to the system message when tools are offered (as Jinja ``tojson``)."""
    return TOOLS_HEADER + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools) + TOOLS_FOOTER


def hermes_prefill(tools: Sequence[Tool] | None, tool_choice: Any) -> str:
    """Assistant-turn prefix that enforces ``tool_choice``: ``required`` opens a ``<tool_call>``
    block (the model picks the function), a named function also fixes the name. It ends before the
    arguments' leading space so the model samples ``' {"'`` as it would unforced."""
    mode, name = tool_choice_name(tools, tool_choice)
    if mode == "required":
        return CALL_OPEN + "\n"
    if mode == "named":
        return CALL_OPEN + "\n" + '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments":'
    return ""


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (one call, or a list of calls, a
    block). The tags make a call explicit, so the function need not be declared (the gateway answers calls
    of functions that were not offered as plain text, as OpenAI does)."""

    name: str = "hermes"
    markers: tuple[str, ...] = (CALL_OPEN,)

    def find_calls(self, text: str, tool_names: frozenset[str]) -> FoundCalls:
        found = FoundCalls("")
        kept: list[str] = []
        position = 0
        for match in _BLOCK.finditer(text):
            body = match.group(1).strip()
            try:
                calls = call_objects(json.loads(body))
            except ValueError:
                calls = None
            if calls is None:
                if body or match.group(0).endswith(CALL_CLOSE):
                    found.invalid.append(match.group(0))
                continue  # stays in the content
            kept.append(text[position:match.start()])
            position = match.end()
            found.calls.extend(calls)
        kept.append(text[position:])
        found.text = "".join(kept)
        return found


HERMES = HermesParser()


def parse_hermes(text: str, *, id_seed: str | None = None, finished: bool = True) -> ParsedAction:
    """Decoded assistant text (end-of-turn token already removed) -> :class:`ParsedAction`, hermes calls
    (:func:`~agentr1.core.rendering.call_parsing.parse_text` with :data:`HERMES`)."""
    return parse_text(text, HERMES, id_seed=id_seed, finished=finished)


class HermesTextRenderer(TextRenderer):
    """A text-first renderer (hermes tools in the prompt) whose completions are parsed at the text level: the
    sampled ids up to the end of the turn are decoded (after any prefill) and read by ``tool_parser``
    (hermes unless the model's family or ``--tool-call-parser`` picks another:
    :mod:`agentr1.core.rendering.tool_parsers`)."""

    end_of_turn_ids: tuple[int, ...]
    tool_parser: ToolCallParser = HERMES

    def parse(self, action_ids: Sequence[int], *, prefill: str = "", id_seed: str | None = None,
              tools: Sequence[Tool] | None = None) -> ParsedAction:
        body = list(action_ids[: self.close_turn(action_ids).kept])  # type: ignore[attr-defined]
        finished = bool(body) and body[-1] in self.end_of_turn_ids
        if finished:
            body = body[:-1]
        text = prefill + self.tokenizer.decode(body, skip_special_tokens=False)
        return parse_text(text, self.tool_parser, tools, id_seed=id_seed, finished=finished)
