"""What passes between the call owner (:class:`~agentr1.gateway.model_call.ModelCall`) and the wire formats.

A wire format (OpenAI chat and text completions, Anthropic Messages, OpenAI Responses) is a module of
:mod:`agentr1.gateway.codecs` with three functions, the :class:`WireFormat` protocol: ``decode`` (a parsed body
-> :class:`CallInput`), ``encode`` (the :class:`CallOutcome` -> the response body) and ``stream`` (the call's
events -> server-sent event bytes). A route hands the module and the body to
:meth:`~agentr1.gateway.model_call.ModelCall.answer`, which runs the call; a wire format reads the call through
:class:`CallView` and never runs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agentr1.core.generation import GenerateResult, GrammarSpec, SamplingParams
from agentr1.core.rendering import PromptPlan
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.sessions import SessionState

__all__ = ["CallInput", "CallOutcome", "CallView", "Choice", "Events", "PromptLogprobs", "TextDelta", "WireFormat"]

Message = dict[str, Any]
Body = TypeVar("Body", contravariant=True)


@dataclass
class CallInput:
    """A request in the gateway's canonical form, whatever format it arrived in."""

    endpoint: str  # "chat", "completions", "responses", "messages": the wire format
    model: str
    sampling: SamplingParams
    explicit_max_tokens: bool  # the client set a limit (too long for the context: 400, not clipped)
    n: int = 1
    stream: bool = False  # answer with server-sent events
    messages: list[Message] | None = None  # OpenAI chat messages: a chat call
    prompts: list[list[int]] | None = None  # token ids: a text completion (one step per prompt and sample)
    tools: list[dict[str, Any]] | None = None  # OpenAI chat tools
    tool_choice: Any = None
    parallel_tool_calls: bool = False  # a forced call may be followed by more (the client asked for it)
    grammar: GrammarSpec | None = None  # constrained decoding asked by the format (response_format, text.format)
    prompt_logprobs: bool = False  # score the prompt's own tokens (echo with logprobs; GenerateRequest's)
    messages_sent: Any = None  # the request as the agent sent it, in its own format (default: ``messages``)
    session_hint: str | None = None  # the session of the conversation it continues, if the call names none
    extra: dict[str, Any] = field(default_factory=dict)  # format-specific state the encoder needs back


@dataclass
class Choice:
    index: int
    message: Message  # the assistant message (chat) or {"role": "assistant", "content": text} (completions)
    finish_reason: str  # OpenAI's: stop, length, tool_calls
    result: GenerateResult | None = None  # what was sampled (None for an external model)
    prompt_index: int = 0
    step: int = -1  # the stored step's index
    rest: str = ""  # streamed: the text not sent as deltas yet
    parser: str | None = None  # the tool-call parser that read the sampled text (chat)


@dataclass
class TextDelta:
    """Streamed text of one choice, with the tokens sampled since the previous delta of that choice."""

    choice: int
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[Any] | None = None


@dataclass
class PromptLogprobs:
    """The prompt's own log-probabilities of one choice (a call with ``prompt_logprobs``), before its text."""

    choice: int
    logprobs: list[float | None]
    top_logprobs: list[Any]


@dataclass
class CallOutcome:
    choices: list[Choice]
    steps: list[int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    model: str


# a streamed call: text deltas (and, asked for, each choice's prompt log-probabilities first), then the recorded outcome
Events = AsyncIterator[TextDelta | PromptLogprobs | CallOutcome]


class CallView(Protocol):
    """What a wire format reads of the call it answers."""

    gw: Gateway
    state: SessionState
    spec: CallInput
    request_id: str
    created: int
    external: bool  # an external model (text in, text out; not trainable)
    plan: PromptPlan | None  # the rendered prompt of a chat call

    @property
    def drift(self) -> bool: ...

    def choice_prompts(self) -> list[list[int]]:
        """The prompt's token ids of each choice, in choice order."""
        ...


class WireFormat(Protocol[Body]):
    """One API's wire format (a module of :mod:`agentr1.gateway.codecs`)."""

    def decode(self, gw: Gateway, body: Body) -> CallInput:
        """The call a parsed request body asks for; an :class:`~agentr1.gateway.errors.APIError` if it is invalid."""
        ...

    def encode(self, call: CallView, outcome: CallOutcome) -> dict[str, Any]:
        """The response body of a call answered whole."""
        ...

    def stream(self, call: CallView, events: Events) -> AsyncIterator[bytes]:
        """The server-sent events of a streamed call; errors after the first event are reported in-band."""
        ...
