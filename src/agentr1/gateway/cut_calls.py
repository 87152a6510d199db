"""A tool call cut short by ``max_tokens``, answered as OpenAI answers it: a tool call whose ``arguments`` are the
JSON text written so far, with ``finish_reason`` "length", not the call's raw markup as ``content``.

The model's tool-call parser (:mod:`agentr1.core.rendering`) reads whole calls; a call it cannot read stays in the
content and is listed in ``ParsedAction.invalid_tool_calls``. When the turn was cut (no end of turn) and such a block
ends the content, that block is the call the cut fell in: :func:`cut_call` reads its function name and the arguments'
text from it (``{"name": "f", "arguments": {"x": "1`` -> ``f``, ``{"x": "1``). A forced call whose prompt opened the
call (``tool_choice`` "required") and that was cut before the model wrote anything in it is one too. The function's
name is the one written; cut inside the name, it is the offered function that name begins (the named function of a
named ``tool_choice``); when that is not one function, no call is made up: the block is dropped from the content.
The stored step keeps the ids as sampled: this only describes them."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from agentr1.core.rendering import ParsedAction

__all__ = ["CutCall", "answer_cut_call", "cut_call"]

_HEAD = re.compile(r'\{\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)(?P<closed>")?'
                   r'(?:\s*,\s*"(?:arguments|parameters)"\s*:\s*(?P<arguments>.*))?', re.DOTALL)


@dataclass(frozen=True)
class CutCall:
    """What a cut turn says: its content without the cut call (None: nothing left), and the call (None: a call
    whose function cannot be told)."""

    content: str | None
    name: str | None
    arguments: str


def answer_cut_call(parsed: ParsedAction, *, prefill: str, tools: list[dict[str, Any]], tool_choice: Any) -> None:
    """Turn the call an unfinished ``parsed`` turn was cut in into a tool call of ``parsed`` (its markup out of the
    content, a new ``call_<24 hex>`` id); nothing when the turn did not end in a call."""
    cut = None if parsed.finished else cut_call(parsed, prefill=prefill, tools=tools, tool_choice=tool_choice)
    if cut is None:
        return
    parsed.content = cut.content
    if cut.name is not None:
        parsed.tool_calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                  "function": {"name": cut.name, "arguments": cut.arguments}})


def cut_call(parsed: ParsedAction, *, prefill: str, tools: list[dict[str, Any]], tool_choice: Any) -> CutCall | None:
    """The call a turn cut by ``max_tokens`` ended in (see the module docstring); None when it did not end in one.
    ``prefill``: the text the prompt opened the turn with; ``tools``: the offered tools (OpenAI chat form)."""
    content = (parsed.content or "").rstrip()
    block = None
    if parsed.invalid_tool_calls and content.endswith(parsed.invalid_tool_calls[-1].rstrip()):
        block = parsed.invalid_tool_calls[-1].rstrip()
    elif prefill.strip() and content == prefill.strip():  # the prompt opened the call; nothing was written in it
        block = content
    if block is None:
        return None
    before = content[: len(content) - len(block)].strip() or None
    name, arguments = _read(block[block.find("{"):] if "{" in block else "")
    if name is None or not name[1]:
        name = (_offered(name[0] if name else "", tools, tool_choice), True)
    return CutCall(before, name[0], arguments)


def _read(text: str) -> tuple[tuple[str, bool] | None, str]:
    """((the function name written, whether it is whole), the arguments' text) of a call object's start."""
    try:
        whole, _ = json.JSONDecoder().raw_decode(text)  # the object is whole: cut in the markup after it
    except ValueError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("name"), str):
        arguments = whole.get("arguments", whole.get("parameters", {}))
        return (whole["name"], True), arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                                              ensure_ascii=False)
    head = _HEAD.match(text)
    if head is None:
        return None, ""
    closed = head.group("closed") is not None
    try:
        name = json.loads(f'"{head.group("name")}"') if closed else head.group("name")
    except ValueError:
        return None, ""
    return (name, closed), head.group("arguments") or ""


def _offered(begun: str, tools: list[dict[str, Any]], tool_choice: Any) -> str | None:
    """The function a call cut inside its name (``begun``) calls: the named one, else the one offered function whose
    name begins so."""
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        named = function.get("name") if isinstance(function, dict) else tool_choice.get("name")
        if isinstance(named, str):
            return named
    names = [t["function"]["name"] for t in tools if t["function"]["name"].startswith(begun)]
    return names[0] if len(names) == 1 else None
