"""Hermes-style tool calls and ``<think>`` reasoning, at the text level.

Hermes format (Qwen2.5, NousResearch Hermes, our SmolLM2 template)::

    <tool_call>
    {"name": "calc", "arguments": {"expression": "12*7"}}
    </tool_call>

The parser works on decoded text, not on token ids: in SmolLM2's vocabulary ``<tool_call>`` is five
ordinary tokens, so an id-level matcher (``renderers``' qwen3 parser) finds nothing. It is tolerant:
a block whose JSON does not parse, or that has no function name, stays in ``content`` verbatim and
is listed in ``invalid_tool_calls``; nothing raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agentr1.core.rendering.base import ParsedAction, TextRenderer, Tool, new_call_id, tool_choice_name

__all__ = [
    "TOOLS_FOOTER",
    "TOOLS_HEADER",
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

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
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


def _calls_in(body: str) -> list[tuple[str, str]] | None:
    """The (name, arguments JSON) pairs a block holds, or None when it is not a valid call."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    items = parsed if isinstance(parsed, list) and parsed else [parsed]
    calls = []
    for item in items:
        if not isinstance(item, dict):
            return None
        name = item.get("name")
        arguments = item.get("arguments", item.get("parameters", {}))
        if isinstance(arguments, str):  # some models double-encode; accept a JSON object string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            return None
        calls.append((name, json.dumps(arguments, ensure_ascii=False)))
    return calls


def parse_hermes(text: str, *, id_seed: str | None = None, finished: bool = True) -> ParsedAction:
    """Decoded assistant text (end-of-turn token already removed) -> :class:`ParsedAction`.

    Content is stripped of surrounding whitespace when tool calls or reasoning were taken out of it
    (the newlines around the tags are format, not content); ``None`` when only tool calls remain."""
    reasoning, rest, had_reasoning = split_reasoning(text)
    tool_calls: list[dict[str, Any]] = []
    invalid: list[str] = []
    kept: list[str] = []
    position = 0
    for match in _BLOCK.finditer(rest):
        calls = _calls_in(match.group(1).strip())
        if calls is None:
            if match.group(1).strip() or match.group(0).endswith(CALL_CLOSE):
                invalid.append(match.group(0))
            continue  # stays in the content
        kept.append(rest[position:match.start()])
        position = match.end()
        for name, arguments in calls:
            tool_calls.append({
                "id": new_call_id(id_seed, len(tool_calls)),
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            })
    kept.append(rest[position:])
    text_left = "".join(kept)
    if tool_calls or had_reasoning:
        text_left = text_left.strip()
    content = None if tool_calls and not text_left else text_left
    return ParsedAction(content=content, tool_calls=tool_calls, reasoning=reasoning,
                        invalid_tool_calls=invalid, finished=finished)


class HermesTextRenderer(TextRenderer):
    """A text-first renderer whose completions are parsed as hermes-style text: the sampled ids up to
    the end of the turn are decoded (after any prefill) and handed to :func:`parse_hermes`."""

    end_of_turn_ids: tuple[int, ...]

    def parse(self, action_ids: Sequence[int], *, prefill: str = "", id_seed: str | None = None) -> ParsedAction:
        body = list(action_ids[: self.close_turn(action_ids).kept])  # type: ignore[attr-defined]
        finished = bool(body) and body[-1] in self.end_of_turn_ids
        if finished:
            body = body[:-1]
        text = prefill + self.tokenizer.decode(body, skip_special_tokens=False)
        return parse_hermes(text, id_seed=id_seed, finished=finished)
