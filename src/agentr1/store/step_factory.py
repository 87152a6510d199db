"""The one way a caller of a model builds the :class:`StepRecord` of a call: :func:`new_step`, with a typed
:class:`Action` (stored as the ``action`` dict) and, for a trainable step, the :class:`SampledTokens`.

Used by the gateway (every call it answers) and the trainer's judge (every judgement it asks for)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from agentr1.store.records import StepRecord

__all__ = ["Action", "ActionKind", "SampledTokens", "new_step"]


class ActionKind(enum.StrEnum):
    """What the model did: answered in text (possibly with reasoning) or called tools."""

    TEXT = "text"
    TOOL_CALLS = "tool_calls"


@dataclass(slots=True)
class Action:
    """a_t as a step stores it: the text, tool calls and reasoning; where the call has them, the assistant
    message as answered (chat formats), the prefill the prompt ended with, a provider's log-probabilities, the
    tool-call parser that read the sampled text (``hermes``, ``json``, ...)."""

    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str | None = None
    message: dict[str, Any] | None = None
    prefill: str | None = None
    provider_logprobs: Any = None
    parser: str | None = None

    @classmethod
    def of_message(cls, message: dict[str, Any], *, prefill: str | None = None,
                   provider_logprobs: Any = None, parser: str | None = None) -> Action:
        """The action of an OpenAI-style assistant message (``content``, ``tool_calls``, ``reasoning_content``)."""
        return cls(message.get("content"), message.get("tool_calls"), message.get("reasoning_content"), message,
                   prefill, provider_logprobs, parser)

    @property
    def kind(self) -> ActionKind:
        return ActionKind.TOOL_CALLS if self.tool_calls else ActionKind.TEXT

    def to_dict(self) -> dict[str, Any]:
        """``StepRecord.action``: content, tool_calls and reasoning always, the other fields when set."""
        stored: dict[str, Any] = {"content": self.content, "tool_calls": self.tool_calls, "reasoning": self.reasoning}
        if self.message is not None:
            stored["message"] = self.message
        if self.prefill is not None:
            stored["prefill"] = self.prefill
        if self.provider_logprobs is not None:
            stored["provider_logprobs"] = self.provider_logprobs
        if self.parser is not None:
            stored["parser"] = self.parser
        return stored


@dataclass(slots=True)
class SampledTokens:
    """The token side of a trainable step: the prompt's ids, the sampled ids and their log-probabilities."""

    observation_ids: list[int]
    action_ids: list[int]
    action_logprobs: list[float] | None
    policy_version: int = 0


def new_step(session_id: str, index: int, action: Action, *, model: str, backend: str, sampling: dict[str, Any],
             finish_reason: str | None, model_path: str | None = None, latency_ms: float | None = None, messages_sent: list[Any] | None = None,
             messages_seen: list[Any] | None = None, tools: list[Any] | None = None,
             tokens: SampledTokens | None = None, parent_index: int | None = None, drift: bool = False,
             retry_of: list[int] | None = None) -> StepRecord:
    """The step of one model call. It is trainable exactly when its tokens are known (``tokens``); a call that
    has text only (an external model, a judge) stores no token ids. ``model``: the name it was served under;
    ``model_path``: the model directory that served it (what decodes its ids), where known."""
    return StepRecord(
        session_id=session_id, index=index, parent_index=parent_index,
        observation_ids=tokens.observation_ids if tokens else [], action_ids=tokens.action_ids if tokens else [],
        action_logprobs=tokens.action_logprobs if tokens else None,
        policy_version=tokens.policy_version if tokens else 0, trainable=tokens is not None,
        messages_sent=messages_sent if messages_sent is not None else [],
        messages_seen=messages_seen if messages_seen is not None else [], tools=tools, sampling=sampling,
        action=action.to_dict(), finish_reason=finish_reason, backend=backend, model=model, model_path=model_path, drift=drift,
        retry_of=retry_of, latency_ms=latency_ms,
    )
