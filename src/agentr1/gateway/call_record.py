"""The step records of one :class:`~agentr1.gateway.model_call.ModelCall` and what the session remembers of it.

Used only by the call (under its session's lock); split out to keep the call's file readable. Every step is
built by the store's one factory, :func:`~agentr1.store.new_step`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agentr1.core.rendering import PreviousTurn
from agentr1.gateway.calls import Gateway
from agentr1.gateway.errors import APIError
from agentr1.gateway.wire import Choice
from agentr1.store import Action, FeedbackRecord, SampledTokens, StepRecord, new_step

if TYPE_CHECKING:
    from agentr1.gateway.model_call import ModelCall

__all__ = ["MAX_RECENT_STEPS", "build_steps", "persist", "remember_choices"]

MAX_RECENT_STEPS = 8  # the steps of a session a new call may branch from (besides the last call's choices)


def build_steps(call: ModelCall, choices: list[Choice], latency_ms: float,
                external: list[Any] | None) -> tuple[list[StepRecord], FeedbackRecord | None]:
    """One step per choice, with the indices already set on the choices, and the feedback of the step the call
    continued. ``external``: an external model's results (text only: no token ids, not trainable)."""
    gw, state, spec, plan = call.gw, call.state, call.spec, call.plan
    sent: list[Any] = list(spec.messages_sent if spec.messages_sent is not None else spec.messages or [])
    # one list when the model saw what was sent (no context policy): the store then scans it for images once
    seen: list[Any] = sent if call.messages_seen == sent else list(call.messages_seen or [])
    sampling = spec.sampling.as_dict()
    if external is not None:
        sampling = {"temperature": spec.sampling.temperature, "max_new_tokens": spec.sampling.max_new_tokens}
    if call.spec.endpoint != "chat":
        sampling["endpoint"] = call.spec.endpoint
    retry_of, feedback = None, None
    if plan is not None:  # a chat call on token ids: it continued a step, or retried the last call
        retry_of = list(state.last_call) if repeats_last_call(call) and call.retry_count != 0 else None
        if call.parent_index is not None and plan.continued:
            feedback = FeedbackRecord(state.id, call.parent_index, plan.new_messages, list(plan.new_ids))
    steps = []
    for k, c in enumerate(choices):
        action, tokens, finish, model = _sampled(call, c, None if external is None else external[k])
        steps.append(new_step(
            state.id, c.step, action, model=model, backend=gw.backend.name, sampling=sampling, finish_reason=finish,
            latency_ms=latency_ms, messages_sent=sent, messages_seen=seen, tools=call.tools, tokens=tokens,
            parent_index=call.parent_index, drift=call.drift, retry_of=retry_of))
    call.retry_of = retry_of
    return steps, feedback


def _sampled(call: ModelCall, choice: Choice, external: Any) -> tuple[Action, SampledTokens | None, str | None, str]:
    """(the action, its tokens, the finish reason, the model) of one choice."""
    if external is not None:
        return (Action.of_message(external.message, provider_logprobs=external.logprobs), None,
                external.finish_reason, external.model)
    result = choice.result
    assert result is not None
    if call.plan is None:  # a text completion: a token prompt, no conversation to continue
        tokens = SampledTokens(list(call.prompts[choice.prompt_index]), result.output_ids, result.logprobs,
                               result.policy_version)
        return Action(choice.message["content"]), tokens, result.finish_reason, call.gw.backend.model_name
    # the plan's own prompt list (built for this call), shared with the session's memory
    tokens = SampledTokens(call.plan.prompt_ids, result.output_ids, result.logprobs, result.policy_version)
    action = Action.of_message(choice.message, prefill=call.plan.prefill, parser=choice.parser)
    return action, tokens, choice.finish_reason, call.gw.backend.model_name


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
