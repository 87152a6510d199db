"""One model call, from HTTP request to stored step: the gateway's only call path, owned by one object.

A route hands :meth:`ModelCall.answer` its wire format (a module of :mod:`agentr1.gateway.codecs`, see
:mod:`agentr1.gateway.wire`) and the parsed body; the call runs its whole life here, for every format:

    decode (the format: body -> :class:`~agentr1.gateway.wire.CallInput`)
    -> attribute (auth, model, session) -> prepare (context policy, render or bridge, limits)
    -> generate (whole or streamed; token ids, or text for an external model) -> parse
    -> record (step indices, steps, feedback; rolled back when the write fails)
    -> encode or stream (the format: outcome -> response body, or events -> server-sent events) -> end

The call owns its session's bookkeeping. It counts itself in ``SessionState.in_flight`` from attribution
until it ends (:meth:`ModelCall.end`; a cached session with a call in flight, streamed or not, is not evicted),
and holds ``SessionState.lock`` while it plans its prompt against the session; it allocates step indices and writes
its steps in one transaction of the session registry (:meth:`~agentr1.gateway.sessions.SessionRegistry.recording`,
under the same lock), so concurrent calls of one session get distinct indices, a call never plans against a step
whose write is still undecided, and a failed write leaves the session's history as it was.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi.responses import StreamingResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentr1.core.generation import BackendUnavailable, GenerateRequest, GenerateResult, SamplingParams
from agentr1.core.rendering import PromptPlan, RenderError
from agentr1.gateway.auth import access_control_on, authorize_call, require_session_access
from agentr1.gateway.call_record import build_steps, persist, remember_choices
from agentr1.gateway.codecs.common import FastJSONResponse
from agentr1.gateway.codecs.constraints import tool_call_grammar
from agentr1.gateway.cut_calls import answer_cut_call
from agentr1.gateway.errors import APIError
from agentr1.gateway.gateway import Gateway, client_retry_count
from agentr1.gateway.images import prompt_images
from agentr1.gateway.planning import plan_for_session
from agentr1.gateway.releaser import CHAT_MARKERS, TextReleaser
from agentr1.gateway.sessions import PARENT_SESSION_HEADER, SessionState, explicit_session
from agentr1.gateway.tracing import step_span
from agentr1.gateway.wire import CallInput, CallOutcome, Choice, Events, PromptLogprobs, TextDelta, WireFormat

__all__ = ["ModelCall", "check_context"]

Message = dict[str, Any]
ID_PREFIXES = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_", "messages": "msg_"}
Body = TypeVar("Body")


@dataclass
class _Job:
    prompt_index: int
    request: GenerateRequest


class ModelCall:
    """One call of an agent; see the module docstring. Build it with :meth:`attribute`."""

    def __init__(self, gw: Gateway, state: SessionState, spec: CallInput, *, retry_count: int | None = None) -> None:
        self.gw, self.state, self.spec, self.retry_count = gw, state, spec, retry_count
        self.request_id = f"{ID_PREFIXES.get(spec.endpoint, 'chatcmpl-')}{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.started = time.monotonic()
        self.external = not gw.backend.trainable
        self.messages_seen: list[Message] | None = spec.messages
        self.tools = None if spec.tool_choice == "none" else spec.tools
        self.plan: PromptPlan | None = None
        self.parent_index: int | None = None
        self.prompts: list[list[int]] = []
        self.jobs: list[_Job] = []
        self.multimodal: Any = None  # the prompt's images for the backend (a vision-language model)
        self.retry_of: list[int] | None = None  # the steps this call retries (set when recorded)
        self._released = False
        state.in_flight += 1

    @classmethod
    async def answer(cls, request: Request, wire: WireFormat[Body], body: Body) -> Response:
        """The call's whole life, for every wire format: ``wire`` decodes ``body``, the call is attributed, prepared,
        generated and recorded, ``wire`` encodes the outcome (as JSON) or streams the events, the call ends. A
        refused call leaves no session behind that it created; an error answer names the session when it remains."""
        call = await cls.attribute(request, wire.decode(request.app.state.gateway, body))
        try:
            with step_span(request.headers, call.state.id) as span:
                await call.prepare()
                if call.spec.stream:
                    response: Response = CallStream(wire.stream(call, call.events()), call)
                    return response
                outcome = await call.run()
                if span is not None:
                    span.set_attribute("agentr1.steps", ",".join(map(str, outcome.steps)))
        except BaseException as exc:
            if not await call.end() and isinstance(exc, APIError):
                exc.headers = {**call.headers(), **(exc.headers or {})}
            raise
        await call.end()
        return FastJSONResponse(wire.encode(call, outcome), headers=call.headers(outcome.steps))

    @classmethod
    async def attribute(cls, request: Request, spec: CallInput) -> ModelCall:
        """Check access and the model, find the call's session, and open the call in it."""
        gw: Gateway = request.app.state.gateway
        path_session = request.path_params.get("session_id")
        await authorize_call(request, path_session)
        hint = spec.session_hint
        if hint is not None and explicit_session(request, path_session) is None and access_control_on(request):
            await require_session_access(request, hint)  # continuing a response of a session needs its key
        gw.check_model(spec.model)
        try:
            state = await gw.sessions.resolve(request, path_session, spec.messages, hint=hint)
        except APIError as exc:
            # A session named in the URL is created on first use, unless access control is on (then: 401 above).
            if exc.code != "session_not_found" or not path_session or access_control_on(request):
                raise
            await gw.sessions.create_named(path_session, parent=request.headers.get(PARENT_SESSION_HEADER))
            state = await gw.sessions.resolve(request, path_session, spec.messages, hint=hint)
        return cls(gw, state, spec, retry_count=client_retry_count(request.headers))

    async def end(self) -> bool:
        """The call is over (answered, failed or abandoned): its session may be evicted again, and is discarded if
        the call created it and no call of it stored a step
        (:meth:`~agentr1.gateway.sessions.SessionRegistry.discard_unused`); whether it was."""
        if not self._released:
            self._released = True
            self.state.in_flight -= 1
        return await self.gw.sessions.discard_unused(self.state)

    def headers(self, steps: list[int] | None = None) -> dict[str, str]:
        """The response headers that name the call's session (and its steps, once recorded)."""
        headers = {"X-Agentr1-Session": self.state.id}
        if steps is not None:
            headers["X-Agentr1-Steps"] = ",".join(map(str, steps))
        return headers

    @property
    def drift(self) -> bool:
        return bool(self.plan and self.plan.drift)

    @property
    def is_chat(self) -> bool:
        return self.spec.messages is not None

    def choice_prompts(self) -> list[list[int]]:
        """The prompt's token ids of each choice, in choice order."""
        return [self.prompts[job.prompt_index] for job in self.jobs]

    # -- prepare -------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Apply the session's context policy and render the prompt: continue an earlier step of the session
        token for token when the request extends it, or render afresh; check the context length."""
        if self.state.sampling is not None:  # the session decides the decoding (an evaluation's greedy pass)
            self.spec.sampling = self.state.sampling.apply(self.spec.sampling)
        if self.external:
            return
        if not self.is_chat:
            self.prompts = list(self.spec.prompts or [])
            for ids in self.prompts:
                check_context(self.gw, len(ids), self.spec.sampling, explicit=self.spec.explicit_max_tokens)
        else:
            messages = list(self.spec.messages or [])
            policy = await self.gw.context_policy(self.state)
            self.messages_seen = messages if policy is None else await policy.apply(messages, self.tools)
            async with self.state.lock:
                try:
                    self.plan, self.parent_index = plan_for_session(self.gw.renderer, self.state.history,
                                                                    self.messages_seen, self.tools,
                                                                    self.spec.tool_choice)
                except RenderError as exc:
                    raise APIError(400, f"cannot render the request: {exc}", code="invalid_request",
                                   param="messages") from exc
            self.prompts = [list(self.plan.prompt_ids)]
            self.multimodal = prompt_images(self.gw.renderer, self.gw.backend, self.messages_seen)
            check_context(self.gw, len(self.plan.prompt_ids), self.spec.sampling,
                          explicit=self.spec.explicit_max_tokens)
            if self.plan.drift:
                self.gw.metrics.drift += 1
        grammar = self.spec.grammar
        if self.plan is not None and self.gw.backend.accepts_grammar:
            # a forced call wins over response_format: the prompt already opened the call, the turn has no content
            grammar = tool_call_grammar(self.tools, self.spec.tool_choice, self.plan.prefill,
                                        parallel=self.spec.parallel_tool_calls) or grammar
        for p, ids in enumerate(self.prompts):
            for i in range(self.spec.n):
                sampling = self.spec.sampling.copy()
                if sampling.seed is not None:
                    sampling.seed += i
                choice = len(self.jobs)
                self.jobs.append(_Job(p, GenerateRequest(prompt_ids=list(ids), sampling=sampling,
                                                         request_id=f"{self.request_id}-{choice}",
                                                         session_id=self.state.id, multimodal=self.multimodal,
                                                         grammar=grammar,
                                                         prompt_logprobs=self.spec.prompt_logprobs)))

    # -- generate, whole or streamed ----------------------------------------------------------

    async def run(self) -> CallOutcome:
        """Generate every choice, parse and record them."""
        if self.external:
            return await self._run_external()
        results = await asyncio.gather(*(self.gw.backend.generate(job.request) for job in self.jobs))
        return self._enforce_tool_choice(await self._record([self._choice(i, r) for i, r in enumerate(results)]))

    async def events(self) -> Events:
        """Stream the call: text deltas as they are safe to send, then the recorded outcome (whose choices
        carry in ``rest`` the text not sent yet). Errors are raised; the encoder reports them in-band."""
        if self.external:  # the provider is asked without streaming: the whole answer at once
            outcome = await self._run_external()
            for choice in outcome.choices:
                choice.rest = choice.message.get("content") or ""
            yield outcome
            return
        queue: asyncio.Queue[tuple[int, Any] | BaseException] = asyncio.Queue()

        async def pump(choice: int, request: GenerateRequest) -> None:
            try:
                async for delta in self.gw.backend.stream(request):
                    await queue.put((choice, delta))
            except BaseException as exc:
                await queue.put(exc)

        tasks = [asyncio.create_task(pump(i, job.request)) for i, job in enumerate(self.jobs)]
        ids: list[list[int]] = [[] for _ in self.jobs]
        pending: list[list[tuple[int, float, Any]]] = [[] for _ in self.jobs]  # sampled, not yet in a delta
        releasers = [self._releaser() for _ in self.jobs]
        results: list[GenerateResult | None] = [None] * len(self.jobs)
        try:
            while any(r is None for r in results):
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                k, delta = item
                if delta.prompt_logprobs is not None:  # scored before the choice's first token
                    yield PromptLogprobs(k, delta.prompt_logprobs, delta.prompt_top_logprobs or [])
                if delta.result is not None:
                    results[k] = delta.result
                    ids[k] = list(delta.result.output_ids)
                    continue
                ids[k].extend(delta.token_ids)
                tops = getattr(delta, "top_logprobs", None) or [None] * len(delta.token_ids)
                pending[k].extend(zip(delta.token_ids, delta.logprobs, tops, strict=False))
                text = releasers[k].release(self._decode_partial(ids[k]))
                if text:
                    sent, pending[k] = pending[k], []
                    yield TextDelta(k, text, [t for t, _, _ in sent], [lp for _, lp, _ in sent],
                                    [top for _, _, top in sent])
            choices = [self._choice(i, r) for i, r in enumerate(results) if r is not None]
            for parsed, releaser in zip(choices, releasers, strict=True):
                parsed.rest = releaser.finish(parsed.message.get("content"))
            yield self._enforce_tool_choice(await self._record(choices))  # stored before the stream says it is done
        finally:
            for task in tasks:
                task.cancel()

    def _releaser(self) -> TextReleaser:
        if not self.is_chat:
            return TextReleaser(self.spec.sampling.stop)
        # where a call may begin in the model's format (bare JSON: any "{"): held back until the turn is parsed
        parser = getattr(self.gw.renderer, "tool_parser", None) if self.tools else None
        calls = parser.markers if parser is not None else ()
        return TextReleaser((*CHAT_MARKERS, *calls, *self.spec.sampling.stop),
                            blocked=bool(self.plan and self.plan.prefill))

    def _decode_partial(self, ids: list[int]) -> str:
        return self.gw.renderer.tokenizer.decode(ids, skip_special_tokens=not self.is_chat)

    async def _run_external(self) -> CallOutcome:
        """An external model (LiteLLM): text in, text out; recorded, not trainable."""
        messages = self.spec.messages
        if messages is None:
            raise APIError(400, f"the {self.gw.backend.name} backend answers chat calls only (no token ids for "
                                "text completions)", code="invalid_request", param="prompt")
        chat = self.gw.abilities.chat
        assert chat is not None  # a backend that is not trainable answers chat messages (check_backend)
        results = await chat.generate_chat(
            messages, sampling=self.spec.sampling, tools=self.tools, tool_choice=self.spec.tool_choice,
            n=self.spec.n)
        choices = [Choice(i, r.message, r.finish_reason) for i, r in enumerate(results)]
        return await self._record(choices, external=results)

    # -- parse ----------------------------------------------------------------------------------

    def _choice(self, index: int, result: GenerateResult) -> Choice:
        if result.finish_reason == "abort":
            raise BackendUnavailable("generation was aborted (weights are being updated?); retry", retry_after=1.0)
        if not self.is_chat:
            text = self.gw.renderer.tokenizer.decode(result.output_ids, skip_special_tokens=True)
            if isinstance(result.matched_stop, str) and result.matched_stop in text:
                text = text[: text.rfind(result.matched_stop)]
            return Choice(index, {"role": "assistant", "content": text},
                          "length" if result.finish_reason == "length" else "stop", result,
                          prompt_index=self.jobs[index].prompt_index)
        message, parser = self._assistant_message(index, result)
        reason = "length" if result.finish_reason == "length" else ("tool_calls" if message.get("tool_calls")
                                                                      else "stop")
        return Choice(index, message, reason, result, parser=parser)

    def _assistant_message(self, index: int, result: GenerateResult) -> tuple[Message, str | None]:
        """The assistant message of a sampled choice, and the tool-call parser that read it."""
        renderer, prefill = self.gw.renderer, self.plan.prefill if self.plan else ""
        parsed = renderer.parse(result.output_ids, prefill=prefill, id_seed=f"{self.request_id}-{index}",
                                tools=self.tools)
        if self.tools and result.finish_reason == "length":  # a call cut by max_tokens is a call, as at OpenAI
            answer_cut_call(parsed, prefill=prefill, tools=self.tools, tool_choice=self.spec.tool_choice)
        content = parsed.content
        if parsed.tool_calls and not self.tools:  # no tools offered: tool-call markup is plain text, as at OpenAI
            close = renderer.close_turn(result.output_ids)
            content = renderer.tokenizer.decode(result.output_ids[: close.kept], skip_special_tokens=True)
            parsed.tool_calls = []
        if isinstance(result.matched_stop, str) and content and result.matched_stop in content:
            content = content[: content.rfind(result.matched_stop)]  # OpenAI leaves the stop string out
        message: Message = {"role": "assistant", "content": content}
        if parsed.tool_calls:
            message["tool_calls"] = parsed.tool_calls
        if parsed.reasoning:
            message["reasoning_content"] = parsed.reasoning
        return message, parsed.parser

    # -- record ---------------------------------------------------------------------------------

    async def _record(self, choices: list[Choice], external: list[Any] | None = None) -> CallOutcome:
        """Allocate the steps' indices, store one step per choice (and the feedback of the step this call
        continued), and move the session on, as one transaction of the session registry: if the write fails, the
        session's history is as it was."""
        gw = self.gw
        latency_ms = (time.monotonic() - self.started) * 1000
        async with gw.sessions.recording(self.state) as history:
            indices = history.allocate(len(choices))
            for choice, index in zip(choices, indices, strict=True):
                choice.step = index
            steps, feedback = build_steps(self, history, choices, latency_ms, external)
            if external is not None:
                history.forget_turns()
            elif self.is_chat:
                remember_choices(self, history, choices)
                gw.sessions.note_conversation(self.state, self.spec.messages or [], choices[0].message)
            outcome = self._outcome(choices, indices, external)
            gw.metrics.observe_call(latency_ms, outcome.prompt_tokens, outcome.completion_tokens)
            await persist(gw, steps, feedback)  # not stored: not answered, and the history is put back
        return outcome

    def _enforce_tool_choice(self, outcome: CallOutcome) -> CallOutcome:
        """``tool_choice`` "required" or a named function: every choice must call an offered (the named) function.
        The prompt opens the call; a model that still writes no valid call gets the call answered with 422
        ``tool_choice_not_satisfied`` (its steps stay stored: they are what the policy sampled), never with
        plain content the request ruled out. Under a tool-call grammar (Hermes renderers on a backend with
        ``accepts_grammar``) no call can fail here. A choice cut short by ``max_tokens`` is answered as it is, with
        ``finish_reason`` "length", as OpenAI answers it."""
        choice = self.spec.tool_choice
        if not self.is_chat or self.external or not (choice == "required" or isinstance(choice, dict)):
            return outcome
        offered = {t["function"]["name"] for t in self.tools or []}
        if isinstance(choice, dict):
            offered = {str((choice.get("function") or {}).get("name", choice.get("name")))}
        for c in outcome.choices:
            names = [tc["function"]["name"] for tc in c.message.get("tool_calls") or []]
            if c.finish_reason != "length" and (not names or any(n not in offered for n in names)):
                raise APIError(422, f"tool_choice asked for a call to {sorted(offered)}, but the model wrote no valid "
                                    f"call (step {c.step} records what it sampled); retry to sample again",
                               code="tool_choice_not_satisfied", param="tool_choice",
                               headers={"X-Agentr1-Steps": ",".join(map(str, outcome.steps))})
        return outcome

    def _outcome(self, choices: list[Choice], indices: list[int], external: list[Any] | None) -> CallOutcome:
        if external is not None:
            prompt = external[0].prompt_tokens if external else 0
            return CallOutcome(choices, indices, prompt, sum(r.completion_tokens for r in external), 0,
                               external[0].model if external else self.gw.backend.model_name)
        results = [c.result for c in choices if c.result is not None]
        cached = max((int(getattr(r, "cached_tokens", 0) or 0) for r in results), default=0)
        return CallOutcome(choices, indices, sum(len(p) for p in self.prompts),
                           sum(len(r.output_ids) for r in results), cached, self.gw.backend.model_name)


class CallStream(StreamingResponse):
    """A streamed answer that ends its call however the stream ends (done, failed, client gone, or never
    started because the client left first)."""

    def __init__(self, content: AsyncIterator[bytes], call: ModelCall) -> None:
        super().__init__(content, media_type="text/event-stream", headers={**call.headers(), "Cache-Control": "no-cache"})
        self.call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.call.end()


def check_context(gw: Gateway, prompt_len: int, sampling: SamplingParams, *, explicit: bool) -> None:
    """A prompt that does not fit is a 400; a completion limit that does not fit is a 400 when the client set it,
    else clipped to the room left; no limit (``max_new_tokens`` 0: the call gave none) is the room left."""
    limit = gw.backend.max_context
    if prompt_len >= limit:
        raise APIError(400, f"This model's maximum context length is {limit} tokens. However, your messages "
                            f"resulted in {prompt_len} tokens. Please reduce the length of the messages.",
                       code="context_length_exceeded", param="messages")
    room = limit - prompt_len
    if not sampling.max_new_tokens:
        sampling.max_new_tokens = room
    elif sampling.max_new_tokens > room:
        if explicit:
            raise APIError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                                f"{prompt_len + sampling.max_new_tokens} tokens ({prompt_len} in the messages, "
                                f"{sampling.max_new_tokens} in the completion).",
                           code="context_length_exceeded", param="max_tokens")
        sampling.max_new_tokens = room
