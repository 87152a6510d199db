"""Anthropic Messages (``POST /v1/messages``) as a :class:`~agentr1.gateway.wire.WireFormat`.

Decoding: ``system`` (a string or text blocks) becomes the system message; a user turn's ``tool_result``
blocks become tool messages (in order, before the turn's text), its text blocks the user message; an
assistant turn's text, ``tool_use`` and ``thinking`` blocks become one assistant message with content,
tool calls and reasoning, so the next turn extends the previous prompt and the sampled ids token for token.
The step keeps ``messages_sent`` as the agent sent it (Anthropic blocks, the system prompt first) and
``messages_seen`` in canonical form. Errors use Anthropic's shape (:func:`anthropic_error`).

Streaming: ``message_start``, per content block ``content_block_start`` / ``_delta`` / ``_stop``, then
``message_delta`` with the stop reason and usage, and ``message_stop``. Text goes out as it is released;
reasoning and tool calls once the choice is parsed, from the same parse the non-streamed answer uses; the
step is stored before ``message_delta``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agentr1.gateway.codecs.common import sampling_params, sse
from agentr1.gateway.codecs.errors import failure
from agentr1.gateway.codecs.tools import check_tools, function_tool, unanswered_result
from agentr1.gateway.errors import APIError, anthropic_error
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.schemas import CountTokensRequest, MessagesRequest
from agentr1.gateway.wire import CallInput, CallOutcome, CallView, Events, TextDelta

__all__ = ["count_tokens", "decode", "encode", "stream"]

Message = dict[str, Any]


def _text_blocks(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{where} must be a string or a list of text blocks", code="invalid_request", param=where)
    texts = []
    for k, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise APIError(400, f"{where}[{k}] must be a text block", code="invalid_request", param=f"{where}[{k}]")
        texts.append(block["text"])
    return "".join(texts)


def _user_turn(content: Any, where: str) -> list[Message]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[Message] = []
    texts: list[str] = []
    parts: list[dict[str, Any]] = []  # text and image blocks in order, when the turn has images
    for k, block in enumerate(content):
        at = f"{where}.content[{k}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":  # kept as the block: the renderer reads it (a model without images refuses it)
            parts.append(block)
        elif kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
            result = block.get("content", "")
            text = _text_blocks(result, f"{at}.content") if result else ""
            if block.get("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        else:
            raise APIError(400, f"{at}: a user turn holds text, image and tool_result blocks (got {kind!r})",
                           code="invalid_request", param=at)
    if len(parts) > len(texts):
        out.append({"role": "user", "content": parts})
    elif texts:
        out.append({"role": "user", "content": "".join(texts)})
    if not out:
        raise APIError(400, f"{where}.content must not be empty", code="invalid_request", param=f"{where}.content")
    return out


def _assistant_turn(content: Any, where: str, *, lenient: bool) -> Message:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    message: Message = {"role": "assistant", "content": None}
    for k, block in enumerate(content):
        at = f"{where}.content[{k}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            message["content"] = (message["content"] or "") + block["text"]
        elif kind == "tool_use" and isinstance(block.get("name"), str) and isinstance(block.get("id"), str):
            if not lenient and not isinstance(block.get("input", {}), dict):
                raise APIError(400, f"{at}.input: Input should be a valid dictionary", code="invalid_request",
                               param=f"{at}.input")
            message.setdefault("tool_calls", []).append({
                "id": block["id"], "type": "function",
                "function": {"name": block["name"], "arguments": json.dumps(block.get("input", {}))}})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            message["reasoning_content"] = block["thinking"]
        elif kind != "redacted_thinking":
            raise APIError(400, f"{at}: an assistant turn holds text, tool_use and thinking blocks (got {kind!r})",
                           code="invalid_request", param=at)
    return message


def _canonical(system: Any, turns: list[Any], *, lenient: bool) -> list[Message]:
    """The conversation in canonical form; as at Anthropic, a ``tool_result`` must answer a ``tool_use`` of the
    turn before it, and a ``tool_use`` input is an object (both unchecked with ``lenient_tool_history``)."""
    messages: list[Message] = []
    if system:
        messages.append({"role": "system", "content": _text_blocks(system, "system")})
    for i, turn in enumerate(turns):
        where = f"messages[{i}]"
        if turn.role == "user":
            messages.extend(_user_turn(turn.content, where))
        else:
            messages.append(_assistant_turn(turn.content, where, lenient=lenient))
    if not lenient and (found := unanswered_result(messages)) is not None:
        raise APIError(400, f"unexpected `tool_use_id` found in `tool_result` blocks: {found[1]}. Each `tool_result` "
                            "block must have a corresponding `tool_use` block in the previous message.",
                       code="invalid_request", param="messages")
    return messages


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") not in (None, "custom") or not isinstance(tool.get("input_schema"), dict):
            raise APIError(400, f"tools[{i}]: only client tools with an input_schema are supported",
                           code="invalid_request", param=f"tools[{i}]")
        out.append(function_tool(tool.get("name"), tool.get("description"), tool["input_schema"]))
    return out


def _tool_choice(choice: dict[str, Any] | None) -> Any:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise APIError(400, "tool_choice.type must be auto, any, tool or none", code="invalid_request",
                   param="tool_choice")


def decode(gw: Gateway, body: MessagesRequest) -> CallInput:
    tools, tool_choice = _tools(body.tools), _tool_choice(body.tool_choice)
    check_tools(tools, tool_choice)
    messages = _canonical(body.system, body.messages, lenient=gw.settings.lenient_tool_history)
    sampling = sampling_params(gw.settings, max_tokens=body.max_tokens, temperature=body.temperature,
                               top_p=body.top_p, top_k=body.top_k, stop=body.stop_sequences)
    sent = body.model_dump(include={"messages"}, exclude_none=True)["messages"]  # one dump: the same dicts
    if body.system:
        sent.insert(0, {"role": "system", "content": body.system})
    return CallInput(endpoint="messages", model=body.model, sampling=sampling, explicit_max_tokens=True,
                     stream=body.stream, messages=messages, tools=tools, tool_choice=tool_choice, messages_sent=sent,
                     parallel_tool_calls=(body.tool_choice or {}).get("disable_parallel_tool_use") is False,
                     extra={"body": body})


def _content_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        blocks.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for tc in message.get("tool_calls") or []:
        try:
            arguments = json.loads(tc["function"]["arguments"] or "{}")
        except json.JSONDecodeError:
            arguments = {}
        blocks.append({"type": "tool_use", "id": tc["id"], "name": tc["function"]["name"],
                       "input": arguments if isinstance(arguments, dict) else {"value": arguments}})
    return blocks


def _stop_reason(call: CallView, outcome: CallOutcome) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``) of the answer."""
    choice = outcome.choices[0]
    if choice.finish_reason == "length":
        return "max_tokens", None
    if choice.finish_reason == "tool_calls":
        return "tool_use", None
    matched = choice.result.matched_stop if choice.result is not None else None
    if isinstance(matched, str) and matched in call.spec.sampling.stop:
        return "stop_sequence", matched
    return "end_turn", None


def _usage(outcome: CallOutcome) -> dict[str, Any]:
    return {"input_tokens": outcome.prompt_tokens, "output_tokens": outcome.completion_tokens,
            "cache_read_input_tokens": outcome.cached_tokens, "cache_creation_input_tokens": 0}


def encode(call: CallView, outcome: CallOutcome) -> dict[str, Any]:
    reason, sequence = _stop_reason(call, outcome)
    return {"id": call.request_id, "type": "message", "role": "assistant", "model": outcome.model,
            "content": _content_blocks(outcome.choices[0].message), "stop_reason": reason, "stop_sequence": sequence,
            "usage": _usage(outcome),
            "agentr1": {"session_id": call.state.id, "steps": outcome.steps, "drift": call.drift}}


async def stream(call: CallView, events: Events) -> AsyncIterator[bytes]:
    """The events of one streamed message (see the module docstring); errors in-band, as Anthropic sends them."""

    def ev(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, **fields}, event=kind)

    prompt_tokens = len(call.plan.prompt_ids) if call.plan is not None else 0
    text_open = False
    blocks = 0
    try:
        yield ev("message_start", message={
            "id": call.request_id, "type": "message", "role": "assistant", "model": call.gw.backend.model_name,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": 0, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0}})
        async for event in events:
            if isinstance(event, TextDelta):
                if not text_open:
                    yield ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
                    text_open, blocks = True, 1
                yield ev("content_block_delta", index=0, delta={"type": "text_delta", "text": event.text})
                continue
            choice = event.choices[0]
            final = _content_blocks(choice.message)
            if text_open:
                if choice.rest:
                    yield ev("content_block_delta", index=0, delta={"type": "text_delta", "text": choice.rest})
                yield ev("content_block_stop", index=0)
            for block in final:
                if block["type"] == "text" and text_open:
                    continue
                async for chunk in _block(ev, blocks, block):
                    yield chunk
                blocks += 1
            reason, sequence = _stop_reason(call, event)
            yield ev("message_delta", delta={"stop_reason": reason, "stop_sequence": sequence}, usage=_usage(event),
                     agentr1={"session_id": call.state.id, "steps": event.steps, "drift": call.drift})
            yield ev("message_stop")
    except Exception as exc:  # the status line is gone: in-band, as Anthropic does
        status, message, _code = failure(call.gw, exc)
        yield ev("error", error=anthropic_error(status, message)["error"])


async def _block(ev: Any, index: int, block: dict[str, Any]) -> AsyncIterator[bytes]:
    kind = block["type"]
    if kind == "text":
        yield ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        yield ev("content_block_delta", index=index, delta={"type": "text_delta", "text": block["text"]})
    elif kind == "thinking":
        yield ev("content_block_start", index=index, content_block={"type": "thinking", "thinking": "",
                                                                     "signature": ""})
        yield ev("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": block["thinking"]})
        yield ev("content_block_delta", index=index, delta={"type": "signature_delta", "signature": ""})
    else:
        yield ev("content_block_start", index=index, content_block={"type": "tool_use", "id": block["id"],
                                                                     "name": block["name"], "input": {}})
        yield ev("content_block_delta", index=index, delta={"type": "input_json_delta",
                                                            "partial_json": json.dumps(block["input"])})
    yield ev("content_block_stop", index=index)


def count_tokens(gw: Gateway, body: CountTokensRequest) -> dict[str, int]:
    """The prompt's length as the gateway would render it afresh (no session, no context policy)."""
    gw.check_model(body.model)
    if gw.renderer is None:
        raise APIError(400, "this gateway serves an external model: it has no tokenizer to count with",
                       code="invalid_request")
    tools, tool_choice = _tools(body.tools), _tool_choice(body.tool_choice)
    check_tools(tools, tool_choice)
    messages = _canonical(body.system, body.messages, lenient=gw.settings.lenient_tool_history)
    ids = gw.renderer.render(messages, None if tool_choice == "none" else tools, add_generation_prompt=True)
    return {"input_tokens": len(ids)}
