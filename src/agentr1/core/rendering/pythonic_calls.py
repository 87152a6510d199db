"""Tool calls written as a Python list of calls, as vLLM's ``pythonic`` parser reads them.

Llama 3.2 / 4 and several small tool models write::

    [get_weather(city="Paris"), get_time(zone="Europe/Paris")]

The list ends the turn (text may come before it); every element is a call of a declared function with
keyword arguments whose values are Python literals (strings, numbers, True/False/None, lists, dicts).
Anything else, a list naming an undeclared function included, stays content: code is what a coding model
writes most, so only a list that can be nothing but calls of the request's functions is read as calls.
"""

from __future__ import annotations

import ast
import json
import re

from agentr1.core.rendering.call_parsing import FoundCalls

__all__ = ["PYTHONIC", "PythonicParser"]

_LIST_OF_CALLS = re.compile(r"\[\s*[A-Za-z_]\w*\s*\(")  # where such a list may begin


def _literal_calls(source: str, tool_names: frozenset[str]) -> list[tuple[str, str]] | None:
    """``[f(a=1), g(b="x")]`` -> ``[("f", '{"a": 1}'), ...]``; None unless every element is a call of a declared
    function with literal keyword arguments."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    calls = []
    for element in tree.body.elts:
        if not (isinstance(element, ast.Call) and isinstance(element.func, ast.Name)) or element.args:
            return None
        if element.func.id not in tool_names or any(kw.arg is None for kw in element.keywords):
            return None  # an undeclared function, or **kwargs
        try:
            arguments = {str(kw.arg): ast.literal_eval(kw.value) for kw in element.keywords}
            text = json.dumps(arguments, ensure_ascii=False)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return None  # not a literal (a name, an expression), or not JSON (a set, bytes, complex)
        calls.append((element.func.id, text))
    return calls


class PythonicParser:
    """A Python list of calls of declared functions, at the end of the turn."""

    name: str = "pythonic"
    markers: tuple[str, ...] = ("[",)

    def find_calls(self, text: str, tool_names: frozenset[str]) -> FoundCalls:
        if tool_names:
            for start in _LIST_OF_CALLS.finditer(text):
                calls = _literal_calls(text[start.start():], tool_names)
                if calls is not None:
                    return FoundCalls(text[: start.start()], calls)
        return FoundCalls(text)


PYTHONIC = PythonicParser()
