"""Bounds on what a request body may hold, checked before anything recurses over it or allocates for it.

Every JSON body of every route is parsed by :func:`parse_json` (orjson: no recursion of Python's, no NaN or
Infinity, which JSON does not have), and every request model checks its data with :func:`check_json_value`:
at most :data:`MAX_JSON_DEPTH` levels of nesting and only valid Unicode. A tool's ``parameters`` and a
``response_format`` schema are bounded tighter (:data:`MAX_SCHEMA_DEPTH`), since checking a schema against
its metaschema recurses several Python frames per level (jsonschema ran out of stack at ~100 levels). The
body's size is bounded by the ``max_body_bytes`` setting (:class:`agentr1.gateway.app.BodyLimitMiddleware`).
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request

__all__ = ["MAX_JSON_DEPTH", "MAX_SCHEMA_DEPTH", "BodyTooDeep", "BoundedRoute", "check_json_value", "exceeds_depth",
           "parse_json"]

MAX_JSON_DEPTH = 128  # objects and arrays inside one another, the body itself counted as one level
MAX_SCHEMA_DEPTH = 64  # the same inside a tool's parameters or a response format's schema (~32 nested objects)
_ORJSON_MAX_DEPTH = 254  # orjson.dumps refuses deeper data ("Recursion limit reached"); tests check the number


class BodyTooDeep(json.JSONDecodeError):
    """A body nested more deeply than :data:`MAX_JSON_DEPTH`: FastAPI turns a ``JSONDecodeError`` raised while it
    reads a body into a 400, and so does the chat route."""

    def __init__(self, doc: str = "") -> None:
        super().__init__(f"nested more deeply than {MAX_JSON_DEPTH} levels", doc, 0)


def _no_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError(f"the number {text[:40]} is out of range", text, 0)
    return value


def parse_json(data: bytes) -> Any:
    """``data`` as JSON, or a ``json.JSONDecodeError`` saying why not (too deep: :class:`BodyTooDeep`). Numbers are
    finite floats or integers: ``NaN``, ``Infinity`` and ``1e999`` are refused."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise BodyTooDeep() from None
    try:  # json reads what orjson refuses but is JSON (lone surrogate escapes: refused later, with a reason)
        return json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise BodyTooDeep() from None
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"not UTF-8 ({exc.reason})", "", exc.start) from None


def exceeds_depth(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels deep (``{}`` is one level).
    Iterative (any depth), and it stops at the first level too deep."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _wrapped(data: Any, levels: int) -> Any:
    for _ in range(levels):
        data = [data]
    return data


def check_json_value(data: Any) -> Any:
    """``data`` (a parsed body), or a ``ValueError`` (a 400) when it nests deeper than :data:`MAX_JSON_DEPTH`
    or holds a string that is not valid Unicode (JSON's "\\ud800" escapes decode to strings no tokenizer or
    serializer accepts: a 500 in the tokenizer, or a stored trace that cannot be read back).

    Fast path, in C: orjson encodes the data inside ``254 - MAX_JSON_DEPTH`` extra arrays, which it refuses when
    the data is deeper than the bound or holds a lone surrogate (or a type it does not encode, an integer over 64
    bits); only then are the values walked one by one, for the exact verdict."""
    try:
        orjson.dumps(_wrapped(data, _ORJSON_MAX_DEPTH - MAX_JSON_DEPTH), option=orjson.OPT_NON_STR_KEYS)
        return data
    except (orjson.JSONEncodeError, TypeError):
        pass
    if exceeds_depth(data, MAX_JSON_DEPTH):
        raise ValueError(f"the request nests objects and arrays more than {MAX_JSON_DEPTH} levels deep")
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("strings must be valid Unicode (a lone surrogate \\ud800-\\udfff escape "
                                     "is not)") from None
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return data


class _BoundedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class BoundedRoute(APIRoute):
    """The route class of every router: FastAPI reads JSON bodies through :func:`parse_json` (its own reader, the
    standard library's, recurses and raised ``RecursionError`` on deep bodies)."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Any:
            return await handler(_BoundedRequest(request.scope, request.receive))

        return bounded
