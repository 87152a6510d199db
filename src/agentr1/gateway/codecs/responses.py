"""OpenAI Responses (``POST /v1/responses``) as a :class:`~agentr1.gateway.wire.WireFormat`.

Decoding turns ``instructions`` + ``input`` (a string, or items: messages, ``function_call``,
``function_call_output``, ``reasoning``) into the canonical chat messages the model sees; with
``previous_response_id`` the conversation of that response (its input and its output, as the gateway kept
them) comes first. An assistant turn arrives as several items (reasoning, a message, function calls): they
are joined back into the one assistant message the model produced, so the next turn extends the previous
prompt and the sampled ids token for token. The step keeps ``messages_sent`` as the agent sent it (the
Responses body) and ``messages_seen`` in canonical form.

Streaming: ``response.created``, ``response.in_progress``, output items with their content parts, text and
function-call argument deltas, then ``response.completed`` (or ``.incomplete``) with usage. Text goes out as it
is released; reasoning and tool calls once the choice is parsed, from the same parse the non-streamed answer
uses; the final event carries the answer the non-streamed route returns, and the step is stored before it.
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from agentr1.gateway.codecs.common import sampling_params, sse
from agentr1.gateway.codecs.constraints import response_format_grammar
from agentr1.gateway.codecs.errors import failure
from agentr1.gateway.codecs.tools import check_tools, function_tool, unanswered_result
from agentr1.gateway.errors import APIError
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.schemas import ResponsesRequest
from agentr1.gateway.wire import CallInput, CallOutcome, CallView, Events, TextDelta

__all__ = ["ResponseLog", "decode", "encode", "response_log", "stream"]

Message = dict[str, Any]
MAX_KEPT_RESPONSES = 10_000


class ResponseLog:
    """The responses this gateway answered (with ``store`` true), for ``previous_response_id`` and
    ``GET /v1/responses/{id}``: in memory, the most recent ``limit``, lost when the gateway restarts."""

    def __init__(self, limit: int = MAX_KEPT_RESPONSES) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, tuple[str, list[Message], dict[str, Any]]] = OrderedDict()

    def keep(self, session_id: str, conversation: list[Message], response: dict[str, Any]) -> None:
        self._kept[response["id"]] = (session_id, conversation, response)
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)

    def get(self, response_id: str, *,
            param: str = "previous_response_id") -> tuple[str, list[Message], dict[str, Any]]:
        """A kept response: 400 for an id that is no response id (as OpenAI answers), 404 for one not kept."""
        if not response_id.startswith("resp"):
            raise APIError(400, f"Invalid '{param}': {response_id[:80]!r}. Expected an ID that begins with 'resp'.",
                           code="invalid_value", param=param)
        kept = self._kept.get(response_id)
        if kept is None:
            raise APIError(404, f"no response with id {response_id!r} (responses are kept in memory, with store "
                                "true, while the gateway runs)", code="response_not_found", param=param)
        return kept


def response_log(gw: Gateway) -> ResponseLog:
    if gw.responses is None:
        gw.responses = ResponseLog()
    return gw.responses


_TEXT_PARTS = frozenset(("input_text", "output_text", "text", "summary_text", "reasoning_text"))


def _is_text_part(kind: Any) -> bool:
    return isinstance(kind, str) and kind in _TEXT_PARTS  # a part's type may be any JSON value: an object is no key


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if type(content) is list and len(content) == 1:  # the usual turn: one text part (a fast path, same checks)
        part = content[0]
        if type(part) is dict and _is_text_part(part.get("type")) and type(text := part.get("text")) is str:
            return text
    if not isinstance(content, list):
        raise APIError(400, f"{where}.content must be a string or a list of parts", code="invalid_request",
                       param=where)
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not _is_text_part(kind) or not isinstance(part.get("text"), str):
            raise APIError(400, f"{where}.content[{k}]: only text parts are supported (got {kind!r})",
                           code="invalid_request", param=f"{where}.content[{k}]")
        texts.append(part["text"])
    return "".join(texts)


def _user_content(content: Any, where: str) -> Any:
    """A user message's content: its text, or its parts in order when it has ``input_image`` parts (kept as
    they are: the renderer reads them, a model without images refuses them)."""
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "input_image"
                                                for p in content):
        return _text_of(content, where)
    return [p if isinstance(p, dict) and p.get("type") == "input_image"
            else {"type": "text", "text": _text_of([p], f"{where}.content[{k}]")}
            for k, p in enumerate(content)]


def items_to_messages(items: list[Any], *, lenient: bool = False) -> list[Message]:
    """Responses input items -> canonical chat messages; an assistant turn's items become one message. A
    ``function_call``'s arguments are a string, as at OpenAI (``lenient``: any JSON, written as text)."""
    messages: list[Message] = []
    turn: Message | None = None  # the assistant message being assembled from consecutive output items

    def assistant() -> Message:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": None}
            messages.append(turn)
        return turn

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise APIError(400, f"{where} must be an object", code="invalid_request", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise APIError(400, f"{where}.role must be user, assistant, system or developer", param=where,
                               code="invalid_request")
            if "content" not in item:
                raise APIError(400, f"{where} needs content", code="invalid_request", param=f"{where}.content")
            if role == "assistant":
                message = assistant()
                message["content"] = (message["content"] or "") + _text_of(item["content"], where)
            else:
                turn = None
                messages.append({"role": role, "content": _user_content(item["content"], where)
                                 if role == "user" else _text_of(item["content"], where)})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise APIError(400, f"{where}: a function_call needs name and call_id", code="invalid_request",
                               param=where)
            arguments = item.get("arguments", "{}")
            if not lenient and not isinstance(arguments, str):
                raise APIError(400, f"{where}.arguments must be a string (the arguments as JSON text)",
                               code="invalid_type", param=f"{where}.arguments")
            assistant().setdefault("tool_calls", []).append({
                "id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": arguments if isinstance(arguments, str)
                             else json.dumps(arguments)}})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str) or "output" not in item:
                raise APIError(400, f"{where}: a function_call_output needs call_id and output",
                               code="invalid_request", param=where)
            output = item["output"]
            turn = None
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": output if isinstance(output, str) else _text_of(output, where)})
        elif kind == "reasoning":
            summary = item.get("content") or item.get("summary") or []
            text = _text_of(summary, where) if summary else ""
            if text:
                assistant()["reasoning_content"] = text
        else:
            raise APIError(400, f"{where}: input items of type {kind!r} are not supported (messages, function_call, "
                                "function_call_output and reasoning are)", code="invalid_request", param=where)
    return messages


def _tools(body: ResponsesRequest) -> list[dict[str, Any]] | None:
    if not body.tools:
        return None
    tools = []
    for i, tool in enumerate(body.tools):
        if tool.get("type") != "function":
            raise APIError(400, f"tools[{i}]: only function tools are supported (got {tool.get('type')!r})",
                           code="invalid_request", param=f"tools[{i}]")
        tools.append(function_tool(tool.get("name"), tool.get("description"), tool.get("parameters")))
    return tools


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, dict):
        raise APIError(400, f"tool_choice of type {choice.get('type')!r} is not supported", code="invalid_request",
                       param="tool_choice")
    return choice


def decode(gw: Gateway, body: ResponsesRequest) -> CallInput:
    tools, tool_choice = _tools(body), _tool_choice(body.tool_choice)
    check_tools(tools, tool_choice)
    grammar = response_format_grammar(gw.backend, (body.text or {}).get("format"), param="text.format")
    history: list[Message] = []
    previous_session = None
    if body.previous_response_id:
        previous_session, history, _ = response_log(gw).get(body.previous_response_id)
        history = list(history)
    items = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    lenient = gw.settings.lenient_tool_history
    new = items_to_messages(items, lenient=lenient)
    # The kept conversation has no instructions: as at OpenAI, a response's instructions are not carried over
    # to the next one; each request gives its own (an agent that repeats them keeps an exact continuation).
    head = [{"role": "system", "content": body.instructions}] if body.instructions else []
    messages = head + history + new
    if not lenient and (found := unanswered_result(messages)) is not None:
        raise APIError(400, f"No tool call found for function call output with call_id {found[1]}.",
                       code="invalid_request", param="input")
    if not any(m["role"] != "system" for m in messages):
        raise APIError(400, "input has no message for the model to answer", code="invalid_request", param="input")
    sampling = sampling_params(gw.settings, max_tokens=body.max_output_tokens, temperature=body.temperature,
                               top_p=body.top_p, top_logprobs=body.top_logprobs or 0)
    sent = list(items)
    if body.instructions:
        sent.insert(0, {"type": "instructions", "role": "system", "content": body.instructions})
    return CallInput(endpoint="responses", model=body.model, sampling=sampling,
                     explicit_max_tokens=body.max_output_tokens is not None, stream=body.stream, messages=messages, tools=tools,
                     tool_choice=tool_choice, grammar=grammar, messages_sent=sent, session_hint=previous_session,
                     parallel_tool_calls=body.parallel_tool_calls and "parallel_tool_calls" in body.model_fields_set,
                     extra={"body": body})


def _output_items(call: CallView, message: Message, *, status: str = "completed") -> list[dict[str, Any]]:
    """The output items of one assistant message: reasoning, the message, function calls."""
    items: list[dict[str, Any]] = []
    suffix = call.request_id.split("_", 1)[-1][:24]
    if message.get("reasoning_content"):
        items.append({"type": "reasoning", "id": f"rs_{suffix}", "summary": [],
                      "content": [{"type": "reasoning_text", "text": message["reasoning_content"]}], "status": status})
    if message.get("content"):
        items.append({"type": "message", "id": f"msg_{suffix}", "status": status, "role": "assistant",
                      "content": [{"type": "output_text", "text": message["content"], "annotations": [],
                                   "logprobs": []}]})
    for k, tc in enumerate(message.get("tool_calls") or []):
        items.append({"type": "function_call", "id": f"fc_{suffix}_{k}", "call_id": tc["id"],
                      "name": tc["function"]["name"], "arguments": tc["function"]["arguments"], "status": status})
    return items


def _response_object(call: CallView, *, status: str, output: list[dict[str, Any]],
                    outcome: CallOutcome | None = None) -> dict[str, Any]:
    body: ResponsesRequest = call.spec.extra["body"]
    incomplete = None
    if outcome is not None and outcome.choices and outcome.choices[0].finish_reason == "length":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    usage = None
    if outcome is not None:
        usage = {"input_tokens": outcome.prompt_tokens,
                 "input_tokens_details": {"cached_tokens": outcome.cached_tokens},
                 "output_tokens": outcome.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": outcome.prompt_tokens + outcome.completion_tokens}
    response = {
        "id": call.request_id, "object": "response", "created_at": call.created, "status": status,
        "model": call.gw.backend.model_name, "output": output, "usage": usage, "error": None,
        "incomplete_details": incomplete, "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens, "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id, "temperature": body.temperature, "top_p": body.top_p,
        "tool_choice": body.tool_choice or "auto", "tools": body.tools or [], "store": body.store,
        "text": body.text or {"format": {"type": "text"}}, "truncation": body.truncation or "disabled",
        "metadata": body.metadata or {}, "reasoning": body.reasoning, "user": body.user,
    }
    if outcome is not None:
        response["agentr1"] = {"session_id": call.state.id, "steps": outcome.steps, "drift": call.drift}
    return response


def _finish_response(call: CallView, outcome: CallOutcome, output: list[dict[str, Any]]) -> dict[str, Any]:
    """The final response object; kept for ``previous_response_id`` when the request asked to store it."""
    response = _response_object(call, status="completed", output=output, outcome=outcome)
    if call.spec.extra["body"].store and outcome.choices:
        conversation = list(call.spec.messages or [])[1 if call.spec.extra["body"].instructions else 0:]
        response_log(call.gw).keep(call.state.id, [*conversation, outcome.choices[0].message], response)
    return response


def encode(call: CallView, outcome: CallOutcome) -> dict[str, Any]:
    return _finish_response(call, outcome, _output_items(call, outcome.choices[0].message))


async def stream(call: CallView, events: Events) -> AsyncIterator[bytes]:
    """The events of one streamed response (see the module docstring); errors in-band, as OpenAI sends them."""
    seq = itertools.count()

    def ev(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, "sequence_number": next(seq), **fields}, event=kind)

    output: list[dict[str, Any]] = []
    message_item: dict[str, Any] | None = None
    try:
        yield ev("response.created", response=_response_object(call, status="in_progress", output=[]))
        yield ev("response.in_progress", response=_response_object(call, status="in_progress", output=[]))
        async for event in events:
            if isinstance(event, TextDelta):
                if message_item is None:
                    message_item = _output_items(call, {"content": " "}, status="in_progress")[0]
                    message_item["content"] = []
                    yield ev("response.output_item.added", output_index=len(output), item=message_item)
                    output.append(message_item)
                    yield ev("response.content_part.added", item_id=message_item["id"], output_index=0,
                             content_index=0, part={"type": "output_text", "text": "", "annotations": []})
                yield ev("response.output_text.delta", item_id=message_item["id"], output_index=0, content_index=0,
                         delta=event.text, logprobs=[])
                continue
            choice = event.choices[0]
            final = _output_items(call, choice.message)
            streamed = None
            if message_item is not None:  # the message item is open: close it (empty if the parse left no text)
                streamed = next((it for it in final if it["type"] == "message"), None) or {
                    **message_item, "status": "completed",
                    "content": [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]}
            for item in ([streamed] if streamed else []) + [it for it in final if it is not streamed]:
                index = output.index(message_item) if item is streamed and message_item else len(output)
                if item is not streamed:
                    opened = {**item, "status": "in_progress"}
                    if item["type"] == "message":
                        opened["content"] = []
                    elif item["type"] == "function_call":
                        opened["arguments"] = ""
                    yield ev("response.output_item.added", output_index=index, item=opened)
                    output.append(item)
                else:
                    output[index] = item
                async for chunk in _item_body(ev, item, index, choice.rest if item is streamed else None):
                    yield chunk
            response = _finish_response(call, event, output)
            yield ev("response.completed" if response["status"] == "completed" else "response.incomplete",
                     response=response)
    except Exception as exc:  # the status line is gone: in-band, as OpenAI does
        status, message, code = failure(call.gw, exc)
        yield ev("error", code=code or ("server_error" if status >= 500 else "invalid_request"), message=message,
                 param=None)
        failed = _response_object(call, status="failed", output=output)
        failed["error"] = {"code": code or "server_error", "message": message}
        yield ev("response.failed", response=failed)


async def _item_body(ev: Any, item: dict[str, Any], index: int, rest: str | None) -> AsyncIterator[bytes]:
    """The events that fill and close one output item (``rest``: a streamed message's unsent text)."""
    if item["type"] == "message":
        text = item["content"][0]["text"]
        if rest is None:
            yield ev("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                     part={"type": "output_text", "text": "", "annotations": []})
            rest = text
        if rest:
            yield ev("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                     delta=rest, logprobs=[])
        yield ev("response.output_text.done", item_id=item["id"], output_index=index, content_index=0, text=text,
                 logprobs=[])
        yield ev("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                 part=item["content"][0])
    elif item["type"] == "function_call":
        yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                 delta=item["arguments"])
        yield ev("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                 arguments=item["arguments"], name=item["name"])
    yield ev("response.output_item.done", output_index=index, item=item)
