"""One model call, from request to stored step: the gateway's hot path.

prepare (attribute, context, prompt ids) -> generate on the backend -> parse -> persist -> answer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from agentr1.core.rendering import PreviousTurn, PromptPlan, RenderError, plan_prompt
from agentr1.gateway.backends.base import (
    Backend,
    BackendUnavailable,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
)
from agentr1.gateway.context import ContextPolicies, ContextPolicy
from agentr1.gateway.errors import APIError
from agentr1.gateway.metrics import Metrics
from agentr1.gateway.sessions import SessionRegistry, SessionState
from agentr1.gateway.settings import GatewaySettings
from agentr1.gateway.writer import StepWriter
from agentr1.store import FeedbackRecord, StepRecord

RETRY_HEADER = "x-stainless-retry-count"  # sent by Stainless SDKs (openai, anthropic): 0, then 1, 2 on retries


def client_retry_count(headers: Any) -> int | None:
    """The client's own attempt counter, None when it sends none (or something that is not a count: the
    header is the client's, not ours, so it is evidence to weigh, never a reason to refuse the call)."""
    value = headers.get(RETRY_HEADER)
    try:
        count = int(value) if value is not None else None
    except ValueError:
        return None
    return count if count is not None and count >= 0 else None


@dataclass
class Gateway:
    """Everything a call needs; one per app, on ``app.state.gateway``."""

    settings: GatewaySettings
    backend: Backend
    renderer: Any
    sessions: SessionRegistry
    writer: StepWriter
    metrics: Metrics
    context: ContextPolicies | None = None  # per-session context policies (None: append-only)

    async def context_policy(self, state: SessionState) -> ContextPolicy | None:
        """The session's policy: chosen at creation (metadata "context") or the gateway's default."""
        if self.context is None:
            return None
        policy = self.context.cached(state.id)
        if policy is None:
            if state.auto:  # auto-created sessions have no choice of their own
                return self.context.default
            record = await asyncio.to_thread(self.sessions.store.get_session, state.id, steps=False)
            policy = self.context.from_metadata(state.id, record.metadata)
        return policy

    def check_model(self, requested: str) -> None:
        served = self.backend.model_name
        if self.settings.accept_any_model or requested in (served, *self.settings.model_aliases):
            return
        raise APIError(404, f"The model `{requested}` does not exist; this gateway serves `{served}`",
                       code="model_not_found", param="model")


@dataclass
class PreparedCall:
    state: SessionState
    messages_sent: list[dict[str, Any]]
    messages_seen: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    plan: PromptPlan
    parent_index: int | None
    sampling: SamplingParams
    n: int
    model: str
    retry_count: int | None = None  # the client's attempt counter (x-stainless-retry-count), None if not sent
    request_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    started: float = field(default_factory=time.monotonic)


def sampling_from(body: Any, settings: GatewaySettings, max_tokens: int | None, top_logprobs: int) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=max_tokens or settings.max_tokens_default,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=max(0, body.top_k or 0),
        stop=list(body.stop or []),
        stop_token_ids=list(body.stop_token_ids or []),
        seed=body.seed,
        top_logprobs=top_logprobs,
    )


async def prepare_chat(gw: Gateway, state: SessionState, body: Any, *, retry_count: int | None = None) -> PreparedCall:
    """Apply the session's context policy, then render the prompt: continue the session's previous call
    token for token (compared with the previous call's ``messages_seen``), or render afresh."""
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    tools = None if body.tool_choice == "none" else body.tools
    policy = await gw.context_policy(state)
    seen = messages if policy is None else await policy.apply(messages, tools)
    try:
        plan, parent = _plan(gw, state, seen, tools, body.tool_choice)
    except RenderError as exc:
        raise APIError(400, f"cannot render the request: {exc}", code="invalid_request", param="messages") from exc
    if plan.reason == "repeat":  # the last call's observation again (a retry or a resample): its sibling
        parent, plan.drift = state.previous_parent, state.previous_drift
    max_tokens = body.max_completion_tokens or body.max_tokens
    sampling = sampling_from(body, gw.settings, max_tokens, (body.top_logprobs or 0) if body.logprobs else 0)
    check_context(gw, len(plan.prompt_ids), sampling, explicit=max_tokens is not None)
    if plan.drift:
        gw.metrics.drift += 1
    return PreparedCall(state=state, messages_sent=messages, messages_seen=seen, tools=tools, plan=plan,
                        parent_index=parent, sampling=sampling, n=body.n, model=gw.backend.model_name,
                        retry_count=retry_count)


def _plan(gw: Gateway, state: SessionState, seen: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
          tool_choice: Any) -> tuple[PromptPlan, int | None]:
    """Continue one of the previous call's choices if the request extends it, else render afresh."""
    fallback: PromptPlan | None = None
    for index, previous in reversed(state.previous):
        plan = plan_prompt(previous, seen, tools, gw.renderer, tool_choice=tool_choice)
        if plan.continued:
            return plan, index
        fallback = fallback or plan
    if fallback is None:
        return plan_prompt(None, seen, tools, gw.renderer, tool_choice=tool_choice), None
    return fallback, state.previous[-1][0]


def check_context(gw: Gateway, prompt_len: int, sampling: SamplingParams, *, explicit: bool) -> None:
    limit = gw.backend.max_context
    if prompt_len >= limit:
        raise APIError(400, f"This model's maximum context length is {limit} tokens. However, your messages "
                            f"resulted in {prompt_len} tokens. Please reduce the length of the messages.",
                       code="context_length_exceeded", param="messages")
    room = limit - prompt_len
    if sampling.max_new_tokens > room:
        if explicit:
            raise APIError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                                f"{prompt_len + sampling.max_new_tokens} tokens ({prompt_len} in the messages, "
                                f"{sampling.max_new_tokens} in the completion).",
                           code="context_length_exceeded", param="max_tokens")
        sampling.max_new_tokens = room


def generate_requests(call: PreparedCall) -> list[GenerateRequest]:
    requests = []
    for i in range(call.n):
        sampling = SamplingParams(**asdict(call.sampling))
        if sampling.seed is not None:
            sampling.seed += i
        requests.append(GenerateRequest(prompt_ids=list(call.plan.prompt_ids), sampling=sampling,
                                        request_id=f"{call.request_id}-{i}", session_id=call.state.id))
    return requests


def assistant_message(gw: Gateway, call: PreparedCall, result: GenerateResult, choice: int) -> dict[str, Any]:
    parsed = gw.renderer.parse(result.output_ids, prefill=call.plan.prefill, id_seed=f"{call.request_id}-{choice}")
    content = parsed.content
    if parsed.tool_calls and not call.tools:  # no tools offered: tool-call markup is plain text, as at OpenAI
        close = gw.renderer.close_turn(result.output_ids)
        content = gw.renderer.tokenizer.decode(result.output_ids[: close.kept], skip_special_tokens=True)
        parsed.tool_calls = []
    if isinstance(result.matched_stop, str) and content and result.matched_stop in content:
        content = content[: content.rfind(result.matched_stop)]  # OpenAI leaves the stop string out
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if parsed.tool_calls:
        message["tool_calls"] = parsed.tool_calls
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    return message


def finish_reason(result: GenerateResult, message: dict[str, Any]) -> str:
    if result.finish_reason == "abort":
        raise BackendUnavailable("generation was aborted (weights are being updated?); retry", retry_after=1.0)
    if result.finish_reason == "length":
        return "length"
    return "tool_calls" if message.get("tool_calls") else "stop"


async def record(gw: Gateway, call: PreparedCall, results: list[GenerateResult],
                 messages: list[dict[str, Any]], reasons: list[str]) -> list[int]:
    """Persist one step per choice (and the feedback of the step this call continued)."""
    state = call.state
    latency_ms = (time.monotonic() - call.started) * 1000
    before = (state.next_index, state.previous, state.previous_parent, state.previous_drift, state.last_call)
    repeat = repeats_last_call(state, call)
    retry_of = list(state.last_call) if repeat and call.retry_count != 0 else None
    indices = list(range(state.next_index, state.next_index + len(results)))
    state.next_index += len(results)
    steps: list[StepRecord] = []
    feedback = None
    if call.parent_index is not None and call.plan.continued:
        feedback = FeedbackRecord(state.id, call.parent_index, call.plan.new_messages, list(call.plan.new_ids))
    for index, result, message, reason in zip(indices, results, messages, reasons, strict=True):
        step = StepRecord(
            session_id=state.id, index=index, parent_index=call.parent_index,
            observation_ids=list(call.plan.prompt_ids), action_ids=result.output_ids, action_logprobs=result.logprobs,
            messages_sent=call.messages_sent, messages_seen=call.messages_seen, tools=call.tools,
            sampling=asdict(call.sampling), finish_reason=reason, policy_version=result.policy_version,
            backend=gw.backend.name, model=call.model, trainable=gw.backend.trainable, drift=call.plan.drift,
            retry_of=retry_of, latency_ms=latency_ms,
            action={"content": message.get("content"), "tool_calls": message.get("tool_calls"),
                    "reasoning": message.get("reasoning_content"), "message": message,
                    "prefill": call.plan.prefill},
        )
        steps.append(step)
    choices = [
        (index, PreviousTurn(messages=call.messages_seen, tools=call.tools, prompt_ids=list(call.plan.prompt_ids),
                             action_ids=result.output_ids, assistant_message=message, prefill=call.plan.prefill))
        for index, result, message in zip(indices, results, messages, strict=True)
    ]
    # A deliberate resample joins its siblings (the agent may continue any of them); anything else, a retry
    # included, is what the agent continues now.
    kept = [c for c in state.previous if c[0] not in (retry_of or ())] if repeat else []
    state.previous = [*kept, *choices]
    state.previous_parent, state.previous_drift, state.last_call = call.parent_index, call.plan.drift, indices
    gw.sessions.note_conversation(state, call.messages_sent, messages[0])
    gw.metrics.observe_call(latency_ms, len(call.plan.prompt_ids), sum(len(r.output_ids) for r in results))
    try:
        await persist(gw, steps, feedback)
    except APIError:
        # Not stored, not answered: the session goes back to where it was, so the agent's retry of this
        # call takes the same index and continues the last stored step (no gap, no false drift). Unless
        # a concurrent call of the session has moved on meanwhile.
        if state.next_index == indices[-1] + 1:
            (state.next_index, state.previous, state.previous_parent, state.previous_drift,
             state.last_call) = before
        raise
    return indices


def repeats_last_call(state: SessionState, call: PreparedCall) -> bool:
    """Whether ``call`` shows the model the same observation as the session's last call, from the same parent:
    by content, so it holds for any client, and also when the first attempt was still being generated when the
    retry arrived (both then continued the same parent)."""
    if not state.previous:
        return False
    return call.parent_index == state.previous_parent and call.plan.prompt_ids == state.previous[-1][1].prompt_ids


async def persist(gw: Gateway, steps: list[StepRecord], feedback: FeedbackRecord | None = None) -> None:
    """Hand the steps to the writer; with durable writes, return only once they are committed."""
    futures = [gw.writer.submit(step, feedback if i == 0 else None) for i, step in enumerate(steps)]
    if gw.settings.durable_writes:
        try:
            await asyncio.gather(*futures)
        except Exception as exc:
            raise APIError(503, f"the step could not be stored ({exc}); the call was not recorded, retry",
                           code="store_unavailable", retry_after=1.0) from exc
