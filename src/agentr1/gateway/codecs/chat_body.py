"""The body of ``POST /v1/chat/completions``, from bytes to a validated request, at a cost that does not grow
with the conversation.

An agent re-sends its whole history on every call, so the body of turn 64 carries 127 messages of which 125
arrived, already validated, with turn 63. Here the body is parsed by orjson, the leading messages equal (as
parsed dicts) to those of the last request that named the same session reuse that request's validated
messages, and only the messages after them (usually the assistant's reply and one new message) go through
pydantic, together with the other fields. The result is the same as validating the whole body: the same
errors (message indices counted in the whole list), the same message dicts (``model_dump(exclude_none=True)``
of each message), with one exception that cannot change what is rendered: a number or boolean in an extra
field that equals, but is not, the one sent before (``1`` for ``1.0`` or ``True``) keeps the earlier value.
Reused dicts are the very objects of the earlier request, so later comparisons of the history with the
session's previous turn take one identity check per message, and the request's own copies are freed at once.

Calls that name no session (auto sessions) are validated whole, as before.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, NamedTuple

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.requests import Request

from agentr1.gateway.limits import parse_json
from agentr1.gateway.schemas import ChatCompletionRequest
from agentr1.gateway.sessions import explicit_session

__all__ = ["CHAT_BODY_OPENAPI", "MAX_REMEMBERED_SESSIONS", "ChatBody", "MessagePrefixes", "read_chat_body",
           "validate_chat_body"]

MAX_REMEMBERED_SESSIONS = 2048  # the sessions whose last request is kept (least recently used go first)
Messages = list[dict[str, Any]]


class ChatBody(NamedTuple):
    """A validated chat request: ``request.messages`` holds only the messages validated by this call (the tail
    after the reused ones); ``messages`` is the whole list as dicts (``None`` fields left out)."""

    request: ChatCompletionRequest
    messages: Messages


class MessagePrefixes:
    """Per session (the one a call names): the raw messages of its last request and their validated dicts."""

    def __init__(self, capacity: int = MAX_REMEMBERED_SESSIONS) -> None:
        self.capacity = capacity
        self._last: OrderedDict[str, tuple[list[Any], Messages]] = OrderedDict()

    def shared(self, key: str | None, raw: list[Any]) -> tuple[int, Messages]:
        """(how many leading messages of ``raw`` equal those of the session's last request, their validated
        dicts)."""
        last = self._last.get(key) if key is not None else None
        if last is None:
            return 0, []
        old_raw, old_valid = last
        n = min(len(raw), len(old_raw))
        if raw[:n] != old_raw[:n]:  # compared in C; the loop below only runs when the history changed
            n = next(i for i, (a, b) in enumerate(zip(raw, old_raw, strict=False)) if a != b)
        return n, old_valid[:n]

    def remember(self, key: str | None, raw: list[Any], valid: Messages) -> None:
        if key is None:
            return
        self._last[key] = (raw, valid)
        self._last.move_to_end(key)
        while len(self._last) > self.capacity:
            self._last.popitem(last=False)


def _prefixes(request: Request) -> MessagePrefixes:
    state = request.app.state
    prefixes = getattr(state, "chat_message_prefixes", None)
    if prefixes is None:
        prefixes = state.chat_message_prefixes = MessagePrefixes()
    return prefixes


def _session_key(request: Request) -> str | None:
    """The session the call names (path, header or baggage), or its bearer token (a session key may name it)."""
    named = explicit_session(request, request.path_params.get("session_id"))
    if named is not None:
        return f"s:{named}"
    auth = request.headers.get("authorization")
    return f"k:{auth}" if auth else None


def _invalid(exc: ValidationError, offset: int) -> RequestValidationError:
    """pydantic's errors as FastAPI reports a body's: located under "body", message indices in the whole list."""
    errors = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if offset and len(loc) > 1 and loc[0] == "messages" and isinstance(loc[1], int):
            loc = ("messages", loc[1] + offset, *loc[2:])
        errors.append({**error, "loc": ("body", *loc)})
    return RequestValidationError(errors)


async def read_chat_body(request: Request) -> ChatBody:
    """The body of ``request``, parsed and validated (the history's prefix only once per session)."""
    data = await request.body()
    if not data:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        raw = parse_json(data)
    except json.JSONDecodeError as exc:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": exc.msg}}]) from None
    lenient = request.app.state.gateway.settings.lenient_tool_history
    return validate_chat_body(raw, _prefixes(request), _session_key(request), lenient_tool_history=lenient)


def validate_chat_body(raw: Any, prefixes: MessagePrefixes, key: str | None, *,
                       lenient_tool_history: bool = False) -> ChatBody:
    """:func:`read_chat_body` after parsing: ``raw`` validated, the messages ``key``'s last request had reused."""
    context = {"lenient_tool_history": lenient_tool_history}
    messages = raw.get("messages") if isinstance(raw, dict) else None
    if not isinstance(messages, list) or not messages:  # nothing to reuse: pydantic says what is wrong
        try:
            body = ChatCompletionRequest.model_validate(raw, context=context)
        except ValidationError as exc:
            raise _invalid(exc, 0) from None
        return ChatBody(body, body.model_dump(include={"messages"}, exclude_none=True)["messages"])
    k, reused = prefixes.shared(key, messages)
    k = min(k, len(messages) - 1)  # at least one message is validated (min_length=1), the last one
    try:
        body = ChatCompletionRequest.model_validate({**raw, "messages": messages[k:]}, context=context)
    except ValidationError as exc:
        raise _invalid(exc, k) from None
    valid = [*reused[:k], *body.model_dump(include={"messages"}, exclude_none=True)["messages"]]
    prefixes.remember(key, messages, valid)
    return ChatBody(body, valid)


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` substituted for their references (none of these models is recursive)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.rsplit("/", 1)[1]])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


# The route reads its body itself (above), so FastAPI does not see a body parameter: describe it in the schema.
CHAT_BODY_OPENAPI: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": _inline_refs(ChatCompletionRequest.model_json_schema())}}}}
