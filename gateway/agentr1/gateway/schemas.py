"""Request bodies of the OpenAI-compatible and session endpoints.

Unknown fields are accepted and ignored (clients send many), but the ones we use are validated,
so a wrong type is a 400 naming the field rather than a surprise later."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


def _reject_lone_surrogates(data: Any) -> Any:
    """JSON may carry escapes like "\\ud800" that decode to strings no tokenizer or serializer accepts: a 400 here,
    not a 500 in the tokenizer or a stored session whose trace cannot be read back. Iterative: any depth.
    Fast path: orjson encodes the whole body in C and refuses surrogates; only when it refuses (or meets a
    type it does not encode) are the strings walked one by one, for the exact verdict."""
    try:
        orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
        return data
    except (orjson.JSONEncodeError, TypeError):
        pass
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("strings must be valid Unicode (a lone surrogate \\ud800-\\udfff escape "
                                     "is not)") from None
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return data


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        """As at OpenAI: every message has content, but an assistant message that calls tools."""
        if self.content is None and not (self.role == "assistant" and (self.tool_calls or
                                                                       self.model_extra.get("function_call"))):
            raise ValueError(f"a {self.role} message needs content"
                             + (" or tool_calls" if self.role == "assistant" else ""))
        return self


class StreamOptions(_Open):
    include_usage: bool = False


class SamplingFields(_Open):
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

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return _reject_lone_surrogates(data)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> list[str] | None:
        stops = [v] if isinstance(v, str) else v
        if stops is not None and (len(stops) > 16 or any(not s for s in stops)):
            raise ValueError("stop must be up to 16 non-empty strings")
        return stops


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


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    run_id: str | None = Field(None, max_length=64)
    task_id: str | None = Field(None, max_length=255)
    group_id: str | None = Field(None, max_length=255)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # The session's context policy: a name or {"policy": name, ...options}; stored as metadata["context"].
    context: str | dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return _reject_lone_surrogates(data)


class RewardCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: float = Field(allow_inf_nan=False)
    name: str = Field("reward", max_length=255)
    step: int | None = Field(None, ge=0, le=2**31 - 1)  # beyond: a SQL integer overflow (500), now a 400
    source: Literal["agent", "environment", "judge"] = "agent"


class SessionFinish(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["finished", "failed", "abandoned"] = "finished"
    reward: float | None = Field(None, allow_inf_nan=False)
    error: str | None = Field(None, max_length=20_000)


class SessionEnding(SessionFinish):
    """One session of a ``POST /sessions/finish`` list."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    api_key: str | None = Field(None, max_length=256)  # this session's key, if the request's headers do not do


MAX_SESSIONS_PER_REQUEST = 4096  # a list of sessions to open or to end in one request


class WeightUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str


class ResponsesRequest(_Open):
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

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return _reject_lone_surrogates(data)


class AnthropicMessage(_Open):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class MessagesRequest(_Open):
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

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return _reject_lone_surrogates(data)

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and any(not s for s in v):
            raise ValueError("stop_sequences must be non-empty strings")
        return v


class CountTokensRequest(_Open):
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
