"""The streamed event sequences of the Responses and Anthropic Messages formats, from one call's events.

Text goes out as it is released (:class:`~agentr1.gateway.model_call.TextDelta`); reasoning and tool calls
once the choice is parsed, from the same parse the non-streamed answer uses; the final event carries the
same answer the non-streamed route returns, and the step is stored before it."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from agentr1.gateway.codecs.anthropic import content_blocks, stop_reason, usage
from agentr1.gateway.codecs.common import sse
from agentr1.gateway.codecs.errors import failure
from agentr1.gateway.codecs.responses import finish_response, response_items, response_object
from agentr1.gateway.errors import anthropic_error
from agentr1.gateway.model_call import CallOutcome, ModelCall, TextDelta

__all__ = ["stream_message", "stream_response"]

Events = AsyncIterator[TextDelta | CallOutcome]


async def stream_response(call: ModelCall, events: Events) -> AsyncIterator[bytes]:
    """``response.created``, ``response.in_progress``, output items with their content parts, text and
    function-call argument deltas, then ``response.completed`` (or ``.incomplete``) with usage."""
    seq = itertools.count()

    def ev(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, "sequence_number": next(seq), **fields}, event=kind)

    output: list[dict[str, Any]] = []
    message_item: dict[str, Any] | None = None
    try:
        yield ev("response.created", response=response_object(call, status="in_progress", output=[]))
        yield ev("response.in_progress", response=response_object(call, status="in_progress", output=[]))
        async for event in events:
            if isinstance(event, TextDelta):
                if message_item is None:
                    message_item = response_items(call, {"content": " "}, status="in_progress")[0]
                    message_item["content"] = []
                    yield ev("response.output_item.added", output_index=len(output), item=message_item)
                    output.append(message_item)
                    yield ev("response.content_part.added", item_id=message_item["id"], output_index=0,
                             content_index=0, part={"type": "output_text", "text": "", "annotations": []})
                yield ev("response.output_text.delta", item_id=message_item["id"], output_index=0, content_index=0,
                         delta=event.text, logprobs=[])
                continue
            choice = event.choices[0]
            final = response_items(call, choice.message)
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
            response = finish_response(call, event, output)
            yield ev("response.completed" if response["status"] == "completed" else "response.incomplete",
                     response=response)
    except Exception as exc:  # the status line is gone: in-band, as OpenAI does
        status, message, code = failure(call.gw, exc)
        yield ev("error", code=code or ("server_error" if status >= 500 else "invalid_request"), message=message,
                 param=None)
        failed = response_object(call, status="failed", output=output)
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


async def stream_message(call: ModelCall, events: Events) -> AsyncIterator[bytes]:
    """``message_start``, per content block ``content_block_start`` / ``_delta`` / ``_stop``, then
    ``message_delta`` with the stop reason and usage, and ``message_stop``."""

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
            final = content_blocks(choice.message)
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
            reason, sequence = stop_reason(call, event)
            yield ev("message_delta", delta={"stop_reason": reason, "stop_sequence": sequence}, usage=usage(event),
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
