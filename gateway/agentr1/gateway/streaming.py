"""Server-sent events for streamed chat completions, chunk for chunk as the OpenAI API sends them.

Text is released as it is sampled, except a tail that could still turn into a tool call, a
reasoning block or a stop string; those are resolved when the choice ends, from the same parse
the non-streamed answer uses, so streamed and non-streamed answers agree.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agentr1.gateway.backends.base import BackendError, GenerateResult
from agentr1.gateway.calls import Gateway, PreparedCall, assistant_message, finish_reason, generate_requests, record

HOLD_MARKERS = ("<tool_call>", "<think>", "<|")


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class TextReleaser:
    """Decides how much of a choice's text is safe to send before the choice ends."""

    def __init__(self, stops: list[str]) -> None:
        self.markers = (*HOLD_MARKERS, *stops)
        self.sent = ""
        self.blocked = False

    def release(self, text: str) -> str:
        if self.blocked:
            return ""
        cut = len(text)
        for marker in self.markers:
            at = text.find(marker)
            if at != -1:
                cut, self.blocked = min(cut, at), True
        if not self.blocked:  # hold back a tail that is a prefix of a marker
            for marker in self.markers:
                for k in range(min(len(marker) - 1, len(text)), 0, -1):
                    if text.endswith(marker[:k]):
                        cut = min(cut, len(text) - k)
                        break
        if cut <= len(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):cut], text[:cut]
        return delta

    def finish(self, content: str | None) -> str:
        content = content or ""
        return content[len(self.sent):] if content.startswith(self.sent) else ""


def _chunk(call: PreparedCall, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": call.request_id, "object": "chat.completion.chunk", "created": call.created,
                            "model": call.model, "system_fingerprint": None, "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return body


def _tool_call_deltas(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"index": i, "id": tc["id"], "type": "function",
             "function": {"name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}}
            for i, tc in enumerate(message.get("tool_calls") or [])]


async def stream_chat(gw: Gateway, call: PreparedCall, include_usage: bool) -> AsyncIterator[bytes]:
    """Yield the SSE byte chunks of one streamed chat completion with ``call.n`` choices."""
    tokenizer = gw.renderer.tokenizer
    queue: asyncio.Queue[tuple[int, list[int], GenerateResult | None] | BaseException] = asyncio.Queue()

    async def pump(choice: int, request: Any) -> None:
        try:
            async for delta in gw.backend.stream(request):
                await queue.put((choice, delta.token_ids, delta.result))
        except BaseException as exc:
            await queue.put(exc)

    requests = generate_requests(call)
    tasks = [asyncio.create_task(pump(i, r)) for i, r in enumerate(requests)]
    ids: list[list[int]] = [[] for _ in requests]
    releasers = [TextReleaser(call.sampling.stop) for _ in requests]
    results: list[GenerateResult | None] = [None] * len(requests)
    try:
        for i in range(call.n):
            yield sse(_chunk(call, [{"index": i, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None}]))
        while any(r is None for r in results):
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            choice, token_ids, result = item
            ids[choice].extend(token_ids)
            if result is not None:
                results[choice] = result
                continue
            text = releasers[choice].release(tokenizer.decode(ids[choice], skip_special_tokens=False))
            if text:
                yield sse(_chunk(call, [{"index": choice, "delta": {"content": text}, "logprobs": None,
                                         "finish_reason": None}]))
        final = [r for r in results if r is not None]
        messages = [assistant_message(gw, call, r, i) for i, r in enumerate(final)]
        reasons = [finish_reason(r, m) for r, m in zip(final, messages, strict=True)]
        for i, (message, releaser) in enumerate(zip(messages, releasers, strict=True)):
            rest = releaser.finish(message.get("content"))
            if rest:
                yield sse(_chunk(call, [{"index": i, "delta": {"content": rest}, "logprobs": None,
                                         "finish_reason": None}]))
            if message.get("tool_calls"):
                yield sse(_chunk(call, [{"index": i, "delta": {"tool_calls": _tool_call_deltas(message)},
                                         "logprobs": None, "finish_reason": None}]))
        indices = await record(gw, call, final, messages, reasons)  # stored before the stream says it is done
        for i, reason in enumerate(reasons):
            last = _chunk(call, [{"index": i, "delta": {}, "logprobs": None, "finish_reason": reason}])
            last["agentr1"] = {"session_id": call.state.id, "steps": [indices[i]], "drift": call.plan.drift}
            yield sse(last)
        if include_usage:
            completion = sum(len(r.output_ids) for r in final)
            prompt = len(call.plan.prompt_ids)
            yield sse(_chunk(call, [], {"prompt_tokens": prompt, "completion_tokens": completion,
                                        "total_tokens": prompt + completion}))
        yield sse("[DONE]")
    except Exception as exc:  # the status line is gone: report in-band, as OpenAI does
        gw.metrics.errors += 1
        status = getattr(exc, "status", getattr(exc, "status_code", 500))
        message = getattr(exc, "message", None) or str(exc)
        code = getattr(exc, "code", None) or ("backend_error" if isinstance(exc, BackendError) else None)
        yield sse({"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                             "param": None, "code": code}})
    finally:
        for task in tasks:
            task.cancel()
