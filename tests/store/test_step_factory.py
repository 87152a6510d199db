"""The one StepRecord factory (new_step) and its typed action: the stored action of each kind of call, and a step
trainable exactly when its tokens are known."""

from __future__ import annotations

from dataclasses import replace

from agentr1.store import Action, ActionKind, SampledTokens, TraceStore, new_step

CALL = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{\"x\": 1}"}}


def test_a_chat_action_keeps_the_message_and_the_prefill() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "add"}
    action = Action.of_message(message, prefill="<tool_call>\n")
    assert action.kind is ActionKind.TOOL_CALLS
    assert action.to_dict() == {"content": None, "tool_calls": [CALL], "reasoning": "add", "message": message,
                                "prefill": "<tool_call>\n"}


def test_a_text_action_stores_content_tool_calls_and_reasoning_only() -> None:
    action = Action("4")
    assert action.kind is ActionKind.TEXT
    assert action.to_dict() == {"content": "4", "tool_calls": None, "reasoning": None}


def test_a_providers_logprobs_are_kept_when_given() -> None:
    message = {"role": "assistant", "content": "hi"}
    assert Action.of_message(message, provider_logprobs=[{"token": "hi"}]).to_dict()["provider_logprobs"] == \
        [{"token": "hi"}]
    assert "provider_logprobs" not in Action.of_message(message).to_dict()


def test_a_step_is_trainable_exactly_when_its_tokens_are_known(store: TraceStore) -> None:
    sampled = new_step("s", 0, Action("4"), model="m", backend="local", sampling={"temperature": 1.0},
                       finish_reason="stop", tokens=SampledTokens([1, 2], [3], [-0.5], policy_version=2))
    text_only = new_step("s", 1, Action("4"), model="judge-model", backend="judge", sampling={},
                         finish_reason="stop", messages_sent=[{"role": "user", "content": "2+2"}])
    assert (sampled.trainable, sampled.observation_ids, sampled.action_ids, sampled.action_logprobs,
            sampled.policy_version) == (True, [1, 2], [3], [-0.5], 2)
    assert (text_only.trainable, text_only.observation_ids, text_only.action_ids, text_only.action_logprobs,
            text_only.messages_seen) == (False, [], [], None, [])
    sid = store.create_session(run_id="r")
    store.append_steps([replace(sampled, session_id=sid), replace(text_only, session_id=sid)])
    stored = store.get_session(sid).steps
    assert [s.action for s in stored] == [{"content": "4", "tool_calls": None, "reasoning": None}] * 2
    assert [s.trainable for s in stored] == [True, False]
