"""OpenAI legacy text completions (``POST /v1/completions``) as a :class:`~agentr1.gateway.wire.WireFormat`: a
prompt as text or token ids, one step per prompt and sample; streamed token by token, with a usage chunk when
asked.

Log-probabilities (``logprobs``: the number of alternatives) come per token, with ``text_offset`` counted in the
choice's whole text; with ``echo`` the prompt's tokens come first with their own log-probabilities and alternatives
(the first token's null, as at OpenAI), which the backend computes (``GenerateRequest.prompt_logprobs``; streamed: in
the echo's chunk, before the choice's text). A backend that cannot score a prompt answers ``echo`` with ``logprobs``
with a 400."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from agentr1.gateway.codecs.common import check_logit_bias_ids, sampling_params, sse
from agentr1.gateway.codecs.errors import stream_error
from agentr1.gateway.errors import APIError
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.schemas import CompletionRequest
from agentr1.gateway.wire import CallInput, CallOutcome, CallView, Choice, Events, PromptLogprobs, TextDelta

__all__ = ["decode", "encode", "stream"]

MAX_PROMPTS = 64


def _prompts(gw: Gateway, prompt: Any) -> list[list[int]]:
    if gw.renderer is None:  # an external model: no tokenizer; the call itself refuses
        return []
    vocab = len(gw.renderer.tokenizer)
    if isinstance(prompt, str):
        prompt = [prompt]
    if prompt and isinstance(prompt[0], int):
        prompt = [prompt]
    out = []
    for p in prompt:
        ids = gw.renderer.tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else list(p)
        if not ids:
            raise APIError(400, "prompt must not be empty", code="invalid_prompt", param="prompt")
        if any(not 0 <= t < vocab for t in ids):
            raise APIError(400, f"prompt token ids must be in [0, {vocab})", code="invalid_prompt", param="prompt")
        out.append(ids)
    if len(out) > MAX_PROMPTS:
        raise APIError(400, f"at most {MAX_PROMPTS} prompts per request", param="prompt")
    return out


def decode(gw: Gateway, body: CompletionRequest) -> CallInput:
    check_logit_bias_ids(gw.renderer, body.logit_bias)
    score_prompt = body.echo and body.logprobs is not None
    if score_prompt and gw.renderer is not None and not gw.backend.accepts_prompt_logprobs:
        raise APIError(400, f"echo with logprobs needs the log-probabilities of the prompt's tokens, which the "
                            f"{gw.backend.name} backend does not compute; leave out echo or logprobs",
                       code="unsupported_parameter", param="echo")
    sampling = sampling_params(gw.settings, max_tokens=body.max_tokens, temperature=body.temperature,
                               top_p=body.top_p, top_k=body.top_k, stop=body.stop, stop_token_ids=body.stop_token_ids,
                               seed=body.seed, top_logprobs=body.logprobs or 0)
    return CallInput(endpoint="completions", model=body.model, sampling=sampling,
                     explicit_max_tokens=body.max_tokens is not None, n=body.n, stream=body.stream,
                     prompts=_prompts(gw, body.prompt), prompt_logprobs=score_prompt,
                     extra={"logprobs": body.logprobs, "echo": body.echo,
                            "include_usage": bool(body.stream_options and body.stream_options.include_usage)})


def _logprobs(call: CallView, token_ids: list[int], logprobs: Sequence[float | None], tops: list[Any] | None,
              offset: int = 0) -> dict[str, Any]:
    """OpenAI's logprobs object of ``token_ids``, whose text starts at character ``offset`` of the choice's text."""
    tok = call.gw.renderer.tokenizer
    tokens = [tok.decode([t], skip_special_tokens=False) for t in token_ids]
    top = None
    if call.spec.extra.get("logprobs"):
        top = [{tok.decode([a.token_id], skip_special_tokens=False): a.logprob for a in (tops[i] or [])}
               if tops and i < len(tops) else {} for i in range(len(tokens))]
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": top, "text_offset": offsets}


def _prompt_logprobs(call: CallView, prompt: list[int], values: list[float | None] | None,
                     tops: list[Any] | None) -> dict[str, Any]:
    """The echoed prompt's entries: its tokens with the backend's ``values`` and alternatives ``tops`` (the first
    token has neither: null, as at OpenAI)."""
    lp = _logprobs(call, prompt, values if values is not None else [None] * len(prompt), tops)
    if lp["top_logprobs"]:
        lp["top_logprobs"][0] = None
    return lp


def _joined(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two logprobs objects of consecutive text as one."""
    return {key: None if first[key] is None else first[key] + second[key] for key in first}


def _end(lp: dict[str, Any], start: int = 0) -> int:
    """The character offset after the last token of ``lp`` (``start`` when it has none)."""
    return lp["text_offset"][-1] + len(lp["tokens"][-1]) if lp["tokens"] else start


def _usage(outcome: CallOutcome) -> dict[str, Any]:
    return {"prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": outcome.cached_tokens}}


def _text(call: CallView, choice: Choice, prompt: list[int]) -> str:
    prefix = ""
    if call.spec.extra.get("echo"):
        prefix = call.gw.renderer.tokenizer.decode(prompt, skip_special_tokens=False)
    return prefix + (choice.message.get("content") or "")


def encode(call: CallView, outcome: CallOutcome) -> dict[str, Any]:
    prompts = call.choice_prompts()
    choices = []
    for c in outcome.choices:
        lp = None
        if call.spec.extra.get("logprobs") is not None and c.result is not None:
            echoed = (_prompt_logprobs(call, prompts[c.index], c.result.prompt_logprobs, c.result.prompt_top_logprobs)
                      if call.spec.extra.get("echo") else None)
            lp = _logprobs(call, c.result.output_ids, c.result.logprobs, c.result.top_logprobs,
                           _end(echoed) if echoed else 0)
            lp = _joined(echoed, lp) if echoed else lp
        choices.append({"index": c.index, "text": _text(call, c, prompts[c.index]), "logprobs": lp, "finish_reason": c.finish_reason})
    return {"id": call.request_id, "object": "text_completion", "created": call.created, "model": outcome.model,
            "choices": choices, "usage": _usage(outcome),
            "agentr1": {"session_id": call.state.id, "steps": outcome.steps}}


def _chunk(call: CallView, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": call.request_id, "object": "text_completion", "created": call.created,
            "model": call.gw.backend.model_name, "choices": choices}


async def stream(call: CallView, events: Events) -> AsyncIterator[bytes]:
    """One event per released piece of text, then each choice's finish, a usage chunk if asked, ``[DONE]``. With
    ``echo`` each choice's prompt comes first: at once, or, scored, when its log-probabilities arrive."""
    want_logprobs = call.spec.extra.get("logprobs") is not None
    prompts = call.choice_prompts()
    sent = [0] * len(prompts)
    offset = [0] * len(prompts)  # characters of each choice's text covered by the logprobs sent so far
    unechoed = set(range(len(prompts))) if call.spec.extra.get("echo") else set()

    def echo(i: int, values: list[float | None] | None, tops: list[Any] | None) -> bytes:
        unechoed.discard(i)
        prompt = call.gw.renderer.tokenizer.decode(prompts[i], skip_special_tokens=False)
        lp = _prompt_logprobs(call, prompts[i], values, tops) if want_logprobs else None
        offset[i] = _end(lp) if lp else 0
        return sse(_chunk(call, [{"index": i, "text": prompt, "logprobs": lp, "finish_reason": None}]))

    try:
        if not call.spec.prompt_logprobs:
            for i in sorted(unechoed):
                yield echo(i, None, None)
        async for event in events:
            if isinstance(event, PromptLogprobs):
                if event.choice in unechoed:
                    yield echo(event.choice, event.logprobs, event.top_logprobs)
                continue
            if isinstance(event, TextDelta):
                if event.choice in unechoed:  # a backend that sent no scores before the text (not expected)
                    yield echo(event.choice, None, None)
                lp = None
                if want_logprobs:
                    lp = _logprobs(call, event.token_ids, event.logprobs, event.top_logprobs, offset[event.choice])
                    offset[event.choice] = _end(lp, offset[event.choice])
                sent[event.choice] += len(event.token_ids)
                yield sse(_chunk(call, [{"index": event.choice, "text": event.text, "logprobs": lp,
                                         "finish_reason": None}]))
                continue
            for c in event.choices:
                if c.index in unechoed:  # the scores came with the result
                    yield echo(c.index, c.result and c.result.prompt_logprobs, c.result and c.result.prompt_top_logprobs)
                lp = None
                if want_logprobs and c.result is not None:
                    k, r = sent[c.index], c.result
                    lp = _logprobs(call, r.output_ids[k:], r.logprobs[k:], r.top_logprobs[k:] if r.top_logprobs else None,
                                   offset[c.index])
                last = _chunk(call, [{"index": c.index, "text": c.rest, "logprobs": lp, "finish_reason": c.finish_reason}])
                last["agentr1"] = {"session_id": call.state.id, "steps": [c.step]}
                yield sse(last)
            if call.spec.extra.get("include_usage"):
                yield sse({**_chunk(call, []), "usage": _usage(event)})
        yield sse("[DONE]")
    except Exception as exc:  # the status line is gone: report in-band, as OpenAI does
        yield sse(stream_error(call.gw, exc))
