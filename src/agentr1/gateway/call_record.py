"""The step records of one model call (:class:`~agentr1.gateway.model_call.ModelCall`) and what its session's
history remembers of it.

Used only by the call, inside its session's recording transaction
(:meth:`~agentr1.gateway.sessions.SessionRegistry.recording`); split out to keep the call's file readable. It reads the
call through :class:`RecordedCall` and changes the session only through the :class:`~agentr1.gateway.call_history.
CallHistory` it is given. Every step is built by the store's one factory, :func:`~agentr1.store.new_step`."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from agentr1.core.rendering import PreviousTurn
from agentr1.gateway.call_history import CallHistory
from agentr1.gateway.errors import APIError
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.wire import CallView, Choice
from agentr1.store import Action, FeedbackRecord, SampledTokens, StepRecord, new_step

__all__ = ["RecordedCall", "build_steps", "persist", "remember_choices"]


class RecordedCall(CallView, Protocol):
    """What the record of a call reads of it, besides what a wire format reads."""

    messages_seen: list[dict[str, Any]] | None  # the messages after the context policy
    tools: list[dict[str, Any]] | None
    parent_index: int | None  # the step the call continued or branched from
    retry_count: int | None  # the client's retry header (0: a first attempt; None: not sent)
    prompts: list[list[int]]
    retry_of: list[int] | None  # set here: the steps the call retries


def build_steps(call: RecordedCall, history: CallHistory, choices: list[Choice], latency_ms: float,
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
        retry_of = list(history.last_call) if _repeats_last_call(call, history) and call.retry_count != 0 else None
        if call.parent_index is not None and plan.continued:
            feedback = FeedbackRecord(state.id, call.parent_index, plan.new_messages, list(plan.new_ids))
    steps = []
    for k, c in enumerate(choices):
        action, tokens, finish, model = _sampled(call, c, None if external is None else external[k])
        steps.append(new_step(
            state.id, c.step, action, model=model, model_path=None if external is not None else gw.backend.model_path,
            backend=gw.backend.name, sampling=sampling, finish_reason=finish,
            latency_ms=latency_ms, messages_sent=sent, messages_seen=seen, tools=call.tools, tokens=tokens,
            parent_index=call.parent_index, drift=call.drift, retry_of=retry_of))
    call.retry_of = retry_of
    return steps, feedback


def _sampled(call: RecordedCall, choice: Choice, external: Any) -> tuple[Action, SampledTokens | None, str | None, str]:
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


def _repeats_last_call(call: RecordedCall, history: CallHistory) -> bool:
    return call.plan is not None and history.repeats_last_call(call.parent_index, call.plan.prompt_ids)


def remember_choices(call: RecordedCall, history: CallHistory, choices: list[Choice]) -> None:
    """What the session's next call may continue: these choices (a deliberate resample joins its siblings; a
    retry replaces the attempt it retries; anything else replaces the last call's choices)."""
    plan = call.plan
    assert plan is not None
    turns = [
        (c.step, PreviousTurn(messages=call.messages_seen or [], tools=call.tools, prompt_ids=plan.prompt_ids,
                              action_ids=c.result.output_ids if c.result else [], assistant_message=c.message,
                              prefill=plan.prefill))
        for c in choices
    ]
    history.remember(turns, parent=call.parent_index, drift=plan.drift, repeated=_repeats_last_call(call, history),
                     replaces=call.retry_of)


async def persist(gw: Gateway, steps: list[StepRecord], feedback: FeedbackRecord | None = None) -> None:
    """Hand the steps to the writer; with durable writes, return only once they are committed."""
    futures = [gw.writer.submit(step, feedback if i == 0 else None) for i, step in enumerate(steps)]
    if gw.settings.write.durable:
        try:
            await asyncio.gather(*futures)
        except Exception as exc:
            raise APIError(503, f"the step could not be stored ({exc}); the call was not recorded, retry",
                           code="store_unavailable", retry_after=1.0) from exc
