"""OpenAI Chat Completions (``POST /v1/chat/completions``) as a :class:`~agentr1.gateway.wire.WireFormat`:
``decode`` a validated body -> :class:`CallInput`, ``encode`` the outcome -> ``chat.completion``, ``stream`` the
call's events -> ``chat.completion.chunk`` s as the OpenAI API sends them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agentr1.gateway.codecs.chat_body import ChatBody
from agentr1.gateway.codecs.common import check_logit_bias_ids, sampling_params, sse
from agentr1.gateway.codecs.constraints import response_format_grammar
from agentr1.gateway.codecs.errors import stream_error
from agentr1.gateway.codecs.tools import check_tool_results, check_tools
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.wire import CallInput, CallOutcome, CallView, Choice, Events, TextDelta

__all__ = ["decode", "encode", "stream", "token_logprobs"]


def decode(gw: Gateway, chat: ChatBody) -> CallInput:
    """The call of a validated body (:func:`~agentr1.gateway.codecs.chat_body.read_chat_body`)."""
    body, messages = chat
    check_tools(body.tools, body.tool_choice)
    check_logit_bias_ids(gw.renderer, body.logit_bias)
    grammar = response_format_grammar(gw.backend, body.model_extra.get("response_format") if body.model_extra else None)
    check_tool_results(messages, lenient=gw.settings.lenient_tool_history)
    max_tokens = body.max_completion_tokens or body.max_tokens
    top_logprobs = (body.top_logprobs or 0) if body.logprobs and gw.backend.trainable else 0
    sampling = sampling_params(gw.settings, max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p,
                               top_k=body.top_k, stop=body.stop, stop_token_ids=body.stop_token_ids, seed=body.seed,
                               top_logprobs=top_logprobs)
    return CallInput(endpoint="chat", model=body.model, sampling=sampling, explicit_max_tokens=max_tokens is not None,
                     n=body.n, stream=body.stream, messages=messages, tools=body.tools, tool_choice=body.tool_choice,
                     grammar=grammar,
                     parallel_tool_calls=(body.model_extra or {}).get("parallel_tool_calls") is True,
                     extra={"logprobs": body.logprobs,
                            "include_usage": bool(body.stream_options and body.stream_options.include_usage)})


def usage(outcome: CallOutcome) -> dict[str, Any]:
    return {"prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": outcome.cached_tokens}}


def token_logprobs(gw: Gateway, token_ids: list[int], logprobs: list[float], tops: list[Any] | None) -> list[dict]:
    """OpenAI's per-token logprob entries (token text, bytes, alternatives)."""
    tok = gw.renderer.tokenizer
    entries = []
    for i, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        text = tok.decode([token_id], skip_special_tokens=False)
        alts = (tops[i] if tops and i < len(tops) else None) or []
        entries.append({
            "token": text, "logprob": logprob, "bytes": list(text.encode()),
            "top_logprobs": [{"token": (t := tok.decode([a.token_id], skip_special_tokens=False)),
                              "logprob": a.logprob, "bytes": list(t.encode())} for a in alts],
        })
    return entries


def _choice_logprobs(call: CallView, choice: Choice) -> dict[str, Any] | None:
    if not call.spec.extra.get("logprobs") or choice.result is None:
        return None
    r = choice.result
    return {"content": token_logprobs(call.gw, r.output_ids, r.logprobs, r.top_logprobs), "refusal": None}


def encode(call: CallView, outcome: CallOutcome) -> dict[str, Any]:
    choices = [{"index": c.index, "message": {**c.message, "refusal": None}, "finish_reason": c.finish_reason,
                "logprobs": _choice_logprobs(call, c)} for c in outcome.choices]
    agentr1: dict[str, Any] = {"session_id": call.state.id, "steps": outcome.steps, "drift": call.drift}
    if call.external:
        agentr1 = {"session_id": call.state.id, "steps": outcome.steps, "trainable": False}
    return {"id": call.request_id, "object": "chat.completion", "created": call.created, "model": outcome.model,
            "system_fingerprint": None, "choices": choices, "usage": usage(outcome), "agentr1": agentr1}


def _chunk(call: CallView, choices: list[dict[str, Any]], usage_: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": call.request_id, "object": "chat.completion.chunk", "created": call.created,
                            "model": call.gw.backend.model_name, "system_fingerprint": None, "choices": choices}
    if usage_ is not None:
        body["usage"] = usage_
    return body


def _tool_call_deltas(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"index": i, "id": tc["id"], "type": "function",
             "function": {"name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}}
            for i, tc in enumerate(message.get("tool_calls") or [])]


async def stream(call: CallView, events: Events) -> AsyncIterator[bytes]:
    """The SSE byte chunks of one streamed chat completion with ``n`` choices; errors in-band, as OpenAI does."""
    want_logprobs = bool(call.spec.extra.get("logprobs"))
    sent: list[int] = [0] * call.spec.n  # tokens whose logprobs went out, per choice
    try:
        for i in range(call.spec.n):
            yield sse(_chunk(call, [{"index": i, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None}]))
        async for event in events:
            if isinstance(event, TextDelta):
                lp = None
                if want_logprobs:
                    lp = {"content": token_logprobs(call.gw, event.token_ids, event.logprobs, event.top_logprobs),
                          "refusal": None}
                    sent[event.choice] += len(event.token_ids)
                yield sse(_chunk(call, [{"index": event.choice, "delta": {"content": event.text}, "logprobs": lp,
                                         "finish_reason": None}]))
                continue
            for c in event.choices:
                lp = None
                if want_logprobs and c.result is not None and len(c.result.output_ids) > sent[c.index]:
                    k, r = sent[c.index], c.result
                    tops = r.top_logprobs[k:] if r.top_logprobs else None
                    lp = {"content": token_logprobs(call.gw, r.output_ids[k:], r.logprobs[k:], tops), "refusal": None}
                if c.rest or lp:
                    yield sse(_chunk(call, [{"index": c.index, "delta": {"content": c.rest}, "logprobs": lp,
                                             "finish_reason": None}]))
                if c.message.get("tool_calls"):
                    yield sse(_chunk(call, [{"index": c.index, "delta": {"tool_calls": _tool_call_deltas(c.message)},
                                             "logprobs": None, "finish_reason": None}]))
            for c in event.choices:
                last = _chunk(call, [{"index": c.index, "delta": {}, "logprobs": None, "finish_reason": c.finish_reason}])
                last["agentr1"] = {"session_id": call.state.id, "steps": [c.step], "drift": call.drift}
                yield sse(last)
            if call.spec.extra.get("include_usage"):
                yield sse(_chunk(call, [], usage(event)))
        yield sse("[DONE]")
    except Exception as exc:  # the status line is gone: report in-band, as OpenAI does
        yield sse(stream_error(call.gw, exc))
