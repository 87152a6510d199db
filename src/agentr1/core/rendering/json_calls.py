"""Tool calls written as bare JSON, as vLLM's ``llama3_json`` parser reads them.

Llama 3.1/3.2 and Qwen2.5-Coder-Instruct (asked with tools) write a call as a JSON object, alone, in a
list, or inside a Markdown fence::

    {"name": "get_weather", "arguments": {"city": "Paris"}}

    ```json
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    ```

Plain JSON is also what a model writes when it answers with data, so only JSON that names a function the
request declared is a call (``{"name": ..., "arguments" | "parameters": {...}}``, or a list of such
objects); any other JSON, and JSON that does not parse, stays content. Several calls may follow each
other (separated by whitespace, ``;`` or ``,``: Llama's multi-call form), each object or fence on its own.
"""

from __future__ import annotations

import json
import re

from agentr1.core.rendering.call_parsing import FoundCalls, call_objects

__all__ = ["JSON", "JsonParser"]

PYTHON_TAG = "<|python_tag|>"  # Llama 3's opening of a tool call, before the JSON
# a Markdown fence (also one the turn ended inside): its language, its body
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:\n?[ \t]*```|\Z)", re.DOTALL)
_JSON_FENCES = ("", "json")
_STARTS = re.compile(r"[\[{]")
_SEPARATORS = re.compile(r"[\s;,]*")
_DECODER = json.JSONDecoder()

Span = tuple[int, int, list[tuple[str, str]]]  # where a call (or a list of calls) is, and its calls


def _declared_calls(value: object, tool_names: frozenset[str]) -> list[tuple[str, str]] | None:
    calls = call_objects(value)
    if calls is None or any(name not in tool_names for name, _ in calls):
        return None
    return calls


class JsonParser:
    """Calls as JSON objects naming declared functions: bare, in a list, or in a ```json / ``` fence."""

    name: str = "json"
    markers: tuple[str, ...] = ("{", "[", "```")

    def find_calls(self, text: str, tool_names: frozenset[str]) -> FoundCalls:
        if not tool_names:
            return FoundCalls(text)
        spans: list[Span] = []
        fences = []
        for fence in _FENCE.finditer(text):
            fences.append(fence.span())
            if fence.group(1).lower() in _JSON_FENCES:
                try:
                    calls = _declared_calls(json.loads(fence.group(2)), tool_names)
                except ValueError:
                    calls = None
                if calls is not None:
                    spans.append((*fence.span(), calls))
        spans.extend(_bare_calls(text, fences, tool_names))
        if not spans:
            return FoundCalls(text)
        spans.sort()
        return FoundCalls(_without(text, spans), [call for _, _, calls in spans for call in calls])


def _bare_calls(text: str, fences: list[tuple[int, int]], tool_names: frozenset[str]) -> list[Span]:
    """Bare JSON calls outside the fences, scanned left to right (a decoded value is skipped whole: JSON nested in
    other JSON is data, not a call)."""
    spans: list[Span] = []
    at = 0
    while (start := _STARTS.search(text, at)) is not None:
        begin = start.start()
        fence_end = next((end for s, end in fences if s <= begin < end), None)
        if fence_end is not None:
            at = fence_end
            continue
        try:
            value, end = _DECODER.raw_decode(text, begin)
        except ValueError:
            at = begin + 1
            continue
        calls = _declared_calls(value, tool_names)
        if calls is not None:
            spans.append((begin, end, calls))
        at = end
    return spans


def _without(text: str, spans: list[Span]) -> str:
    """``text`` with the calls cut out; separators between calls and Llama's python tag go too."""
    kept, position = [], 0
    for begin, end, _ in spans:
        between = text[position:begin]
        kept.append("" if position and _SEPARATORS.fullmatch(between) else between)
        position = end
    kept.append(text[position:])
    left = "".join(kept)
    if left.lstrip().startswith(PYTHON_TAG):
        left = left.lstrip()[len(PYTHON_TAG):]
    return "" if _SEPARATORS.fullmatch(left) else left


JSON = JsonParser()
