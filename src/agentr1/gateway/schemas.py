"""Request bodies of the OpenAI-compatible and session endpoints.

Unknown fields are accepted and ignored (clients send many), but the ones we use are validated,
so a wrong type is a 400 naming the field rather than a surprise later."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator, model_validator

from agentr1.gateway.limits import check_json_value

MAX_STOP_SEQUENCES = 4  # OpenAI: "Up to 4 sequences" (more: 400 array_above_max_length)
MAX_STOP_CHARS = 1000  # per stop string; OpenAI documents no length: ours bounds the text decoded per step to find it
MAX_LOGIT_BIAS = 300  # OpenAI's limit on logit_bias entries
MIN_THINKING_BUDGET = 1024  # Anthropic's minimum thinking.budget_tokens


class _Body(BaseModel):
    """A whole request body: bounded in depth and valid Unicode (:func:`~agentr1.gateway.limits.check_json_value`)
    before any field is validated."""

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        return check_json_value(data)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _has_content(self, info: ValidationInfo) -> ChatMessage:
        """As at OpenAI: every message has content, but an assistant message that calls tools; a tool call has an
        id, a function name and its arguments as a string; a tool message names the call it answers. With the
        ``lenient_tool_history`` setting (validation context), the id, the arguments' type and ``tool_call_id`` go
        unchecked."""
        if self.content is None and not (self.role == "assistant" and (self.tool_calls or
                                                                       self.model_extra.get("function_call"))):
            raise ValueError(f"a {self.role} message needs content"
                             + (" or tool_calls" if self.role == "assistant" else ""))
        lenient = bool(info.context and info.context.get("lenient_tool_history"))
        for k, call in enumerate(self.tool_calls or ()):
            function = call.get("function")
            if call.get("type", "function") != "function" or not isinstance(function, dict) \
                    or not isinstance(function.get("name"), str) or not function["name"]:
                raise ValueError(f"tool_calls[{k}] must be {{'id': ..., 'type': 'function', 'function': "
                                 "{'name': ..., 'arguments': ...}}")
            if lenient:
                continue
            if not isinstance(call.get("id"), str):
                raise ValueError(f"tool_calls[{k}].id is required (a string: the id a tool message answers)")
            if not isinstance(function.get("arguments"), str):
                raise ValueError(f"tool_calls[{k}].function.arguments must be a string (the arguments as JSON "
                                 "text)")
        if self.role == "tool" and self.tool_call_id is None and not lenient:
            raise ValueError("a tool message needs tool_call_id (the id of the tool call it answers)")
        return self


class StreamOptions(_Open):
    include_usage: StrictBool = False  # "yes" or 1 is a 400, as at OpenAI


def _check_stops(stops: list[str] | None, *, most: int | None, name: str) -> None:
    """Stop strings as the real APIs take them: non-empty, at most ``most`` (None: any number), each at most
    :data:`MAX_STOP_CHARS` characters."""
    if stops is None:
        return
    if most is not None and len(stops) > most:
        raise ValueError(f"array too long: expected at most {most} stop sequences, got {len(stops)}")
    for i, stop in enumerate(stops):
        if not stop:
            raise ValueError(f"{name}[{i}] must not be empty")
        if len(stop) > MAX_STOP_CHARS:
            raise ValueError(f"{name}[{i}] is {len(stop)} characters long; at most {MAX_STOP_CHARS}")


def _check_logit_bias(bias: dict[str, Any] | None) -> dict[str, Any] | None:
    """OpenAI's rules for ``logit_bias`` (the token ids' range is checked against the tokenizer by the codec)."""
    if bias is None:
        return None
    if len(bias) > MAX_LOGIT_BIAS:
        raise ValueError(f"too many entries: at most {MAX_LOGIT_BIAS} tokens may be biased, got {len(bias)}")
    for key, value in bias.items():
        if not key.isascii() or not key.isdigit():
            raise ValueError(f"invalid key {key[:40]!r}: keys are token ids (non-negative integers)")
        if isinstance(value, bool) or not isinstance(value, int | float) or not -100 <= value <= 100:
            raise ValueError(f"invalid value for token {key}: {str(value)[:40]}; a bias is a number in [-100, 100]")
    return bias


class SamplingFields(_Open, _Body):
    model: str
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop_token_ids: list[int] | None = None
    logit_bias: dict[str, Any] | None = None  # validated as OpenAI does (not applied)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> list[str] | None:
        stops = [v] if isinstance(v, str) else v
        _check_stops(stops, most=MAX_STOP_SEQUENCES, name="stop")
        return stops

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return _check_logit_bias(v)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @field_validator("tools")
    @classmethod
    def _tools_shape(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, tool in enumerate(v or []):
            fn = tool.get("function")
            if tool.get("type", "function") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}")
        return v


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be empty")
        return v


class SessionCreate(_Body):
    model_config = ConfigDict(extra="forbid")
    session_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    run_id: str | None = Field(None, max_length=64)
    task_id: str | None = Field(None, max_length=255)
    group_id: str | None = Field(None, max_length=255)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # The session's context policy: a name or {"policy": name, ...options}; stored as metadata["context"].
    context: str | dict[str, Any] | None = None


class RewardCreate(_Body):
    model_config = ConfigDict(extra="forbid")
    value: float = Field(allow_inf_nan=False)
    name: str = Field("reward", max_length=255)
    step: int | None = Field(None, ge=0, le=2**31 - 1)  # beyond: a SQL integer overflow (500), now a 400
    source: Literal["agent", "environment", "judge"] = "agent"


class SessionFinish(_Body):
    model_config = ConfigDict(extra="forbid")
    status: Literal["finished", "failed", "abandoned"] = "finished"
    reward: float | None = Field(None, allow_inf_nan=False)
    error: str | None = Field(None, max_length=20_000)


class SessionEnding(SessionFinish):
    """One session of a ``POST /sessions/finish`` list."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    api_key: str | None = Field(None, max_length=256)  # this session's key, if the request's headers do not do


MAX_SESSIONS_PER_REQUEST = 4096  # a list of sessions to open or to end in one request


class WeightUpdate(_Body):
    model_config = ConfigDict(extra="forbid")
    path: str


class ResponsesRequest(_Open, _Body):
    """``POST /v1/responses`` (OpenAI Responses API); items are checked by the codec, which names the bad one."""

    model: str
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool = False
    previous_response_id: str | None = Field(None, max_length=128)
    store: bool = True
    parallel_tool_calls: bool = True
    metadata: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    truncation: str | None = None
    user: str | None = None


class AnthropicMessage(_Open):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class MessagesRequest(_Open, _Body):
    """``POST /v1/messages`` (Anthropic Messages API): ``max_tokens`` is required, as Anthropic requires it."""

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    stop_sequences: list[str] | None = Field(None, max_length=16)
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    stream: bool = False
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, v: list[str] | None) -> list[str] | None:
        _check_stops(v, most=None, name="stop_sequences")
        return v

    @field_validator("thinking")
    @classmethod
    def _thinking(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """Anthropic's rule: extended thinking ``{"type": "enabled", "budget_tokens": >= 1024}`` (thinking is
        not run here: the model's own reasoning is parsed whatever the budget)."""
        if v is None or (v.get("type") != "enabled" and "budget_tokens" not in v):
            return v
        budget = v.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
            raise ValueError(f"thinking.budget_tokens must be an integer >= {MIN_THINKING_BUDGET}, got "
                             f"{str(budget)[:40]}")
        return v


class CountTokensRequest(_Open, _Body):
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
