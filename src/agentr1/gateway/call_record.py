"""The step records of one :class:`~agentr1.gateway.model_call.ModelCall` and what the session remembers of it.

Used only by the call (under its session's lock); split out to keep the call's file readable."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agentr1.core.rendering import PreviousTurn
from agentr1.gateway.calls import Gateway
from agentr1.gateway.errors import APIError
from agentr1.store import FeedbackRecord, StepRecord

if TYPE_CHECKING:
    from agentr1.gateway.model_call import Choice, ModelCall

__all__ = ["MAX_RECENT_STEPS", "build_steps", "persist", "remember_choices"]

MAX_RECENT_STEPS = 8  # the steps of a session a new call may branch from (besides the last call's choices)


def build_steps(call: ModelCall, choices: list[Choice], latency_ms: float,
                external: list[Any] | None) -> tuple[list[StepRecord], FeedbackRecord | None]:
    """One step per choice, with the indices already set on the choices."""
    gw, state, spec = call.gw, call.state, call.spec
    sent: list[Any] = list(spec.messages_sent if spec.messages_sent is not None else spec.messages or [])
    # one list when the model saw what was sent (no context policy): the store then scans it for images once
    seen: list[Any] = sent if call.messages_seen == sent else list(call.messages_seen or [])
    if external is not None:
        return [StepRecord(
            session_id=state.id, index=c.step, observation_ids=[], action_ids=[], action_logprobs=None,
            messages_sent=sent, messages_seen=list(spec.messages or []), tools=call.tools,
            sampling=_sampling(call, {"temperature": spec.sampling.temperature,
                                      "max_new_tokens": spec.sampling.max_new_tokens}),
            action={"content": r.message.get("content"), "tool_calls": r.message.get("tool_calls"),
                    "reasoning": r.message.get("reasoning_content"), "message": r.message,
                    "provider_logprobs": r.logprobs},
            finish_reason=r.finish_reason, backend=gw.backend.name, model=r.model, trainable=False,
            latency_ms=latency_ms,
        ) for c, r in zip(choices, external, strict=True)], None
    if not call.is_chat:  # text completions: token prompts, no conversation to continue
        return [StepRecord(
            session_id=state.id, index=c.step, observation_ids=list(call.prompts[c.prompt_index]),
            action_ids=c.result.output_ids, action_logprobs=c.result.logprobs,
            sampling={**spec.sampling.as_dict(), "endpoint": "completions"},
            action={"content": c.message["content"], "tool_calls": None, "reasoning": None},
            finish_reason=c.result.finish_reason, policy_version=c.result.policy_version, backend=gw.backend.name,
            model=gw.backend.model_name, trainable=gw.backend.trainable, latency_ms=latency_ms,
        ) for c in choices if c.result is not None], None
    plan = call.plan
    assert plan is not None
    repeat = repeats_last_call(call)
    call_retry_of = list(state.last_call) if repeat and call.retry_count != 0 else None
    feedback = None
    if call.parent_index is not None and plan.continued:
        feedback = FeedbackRecord(state.id, call.parent_index, plan.new_messages, list(plan.new_ids))
    steps = []
    prompt_ids = plan.prompt_ids  # the plan's own list (built for this call), shared with the session's memory
    for c in choices:
        assert c.result is not None
        message = c.message
        steps.append(StepRecord(
            session_id=state.id, index=c.step, parent_index=call.parent_index,
            observation_ids=prompt_ids, action_ids=c.result.output_ids,
            action_logprobs=c.result.logprobs, messages_sent=sent, messages_seen=seen,
            tools=call.tools, sampling=_sampling(call, spec.sampling.as_dict()), finish_reason=c.finish_reason,
            policy_version=c.result.policy_version, backend=gw.backend.name, model=gw.backend.model_name,
            trainable=gw.backend.trainable, drift=plan.drift, retry_of=call_retry_of, latency_ms=latency_ms,
            action={"content": message.get("content"), "tool_calls": message.get("tool_calls"),
                    "reasoning": message.get("reasoning_content"), "message": message, "prefill": plan.prefill},
        ))
    call.retry_of = call_retry_of
    return steps, feedback


def _sampling(call: ModelCall, values: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters stored with a step; the wire format when it is not OpenAI chat."""
    endpoint = call.spec.endpoint
    return values if endpoint == "chat" else {**values, "endpoint": endpoint}


def repeats_last_call(call: ModelCall) -> bool:
    """Whether the call shows the model the same observation as the session's last call, from the same parent:
    by content, so it holds for any client, and also when the first attempt was still being generated when the
    retry arrived (both then continued the same parent)."""
    state = call.state
    if not state.previous or call.plan is None:
        return False
    return call.parent_index == state.previous_parent and call.plan.prompt_ids == state.previous[-1][1].prompt_ids


def remember_choices(call: ModelCall, choices: list[Choice]) -> None:
    """What the session's next call may continue: these choices (a deliberate resample joins its siblings; a
    retry replaces the attempt it retries; anything else replaces the last call's choices)."""
    state, plan = call.state, call.plan
    assert plan is not None
    retry_of = call.retry_of
    turns = [
        (c.step, PreviousTurn(messages=call.messages_seen or [], tools=call.tools, prompt_ids=plan.prompt_ids,
                              action_ids=c.result.output_ids if c.result else [], assistant_message=c.message,
                              prefill=plan.prefill))
        for c in choices
    ]
    kept = [t for t in state.previous if t[0] not in (retry_of or ())] if repeats_last_call(call) else []
    state.previous = [*kept, *turns]
    state.recent = [*state.recent, *turns][-MAX_RECENT_STEPS:]  # a new list: a rollback restores the old one
    state.previous_parent, state.previous_drift = call.parent_index, plan.drift
    state.last_call = [c.step for c in choices]


async def persist(gw: Gateway, steps: list[StepRecord], feedback: FeedbackRecord | None = None) -> None:
    """Hand the steps to the writer; with durable writes, return only once they are committed."""
    futures = [gw.writer.submit(step, feedback if i == 0 else None) for i, step in enumerate(steps)]
    if gw.settings.durable_writes:
        try:
            await asyncio.gather(*futures)
        except Exception as exc:
            raise APIError(503, f"the step could not be stored ({exc}); the call was not recorded, retry",
                           code="store_unavailable", retry_after=1.0) from exc
