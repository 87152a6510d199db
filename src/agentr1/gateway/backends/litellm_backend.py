"""The ``litellm`` backend: an external model (teacher, judge, baseline) through LiteLLM
(``litellm.acompletion``): any provider LiteLLM speaks, or any OpenAI-compatible server through the
``openai/<model>`` provider and ``api_base``.

Its steps are recorded with text only and ``trainable = False``: a provider returns text, not the
token ids the policy sampled, so nothing here can be trained on exactly. The :class:`Backend`
protocol is token ids in; this backend answers chat messages instead, through the extra capability
:class:`~.base.ChatGeneration` (``generate_chat``). ``generate``/``stream`` refuse token ids with a
BackendError that says so. The gateway's chat route uses ``generate_chat`` when
``backend.trainable`` is False (docs/backends.md: the extension, and what the gateway stores).

Sampling: temperature, top_p, max_tokens, stop, seed, n, logprobs/top_logprobs, tools and
tool_choice are passed through; ``drop_params=True`` drops what a provider does not support;
``top_k`` only when set (a few providers take it); stop token ids cannot be expressed. LiteLLM's own
retries (``num_retries``) handle transient provider errors. Errors: rate limits, 5xx, timeouts and
connection failures -> :class:`BackendUnavailable` (503 + Retry-After); a 4xx -> :class:`BackendError`
with the provider's message (status 400 for the request's fault, else 502).

LiteLLM fetches its model cost map from the internet at import unless
``LITELLM_LOCAL_MODEL_COST_MAP=True``, which this module sets (if unset) before importing it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from agentr1.core.generation import (
    BackendError,
    BackendUnavailable,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
    StreamDelta,
)
from agentr1.gateway.backends.base import ChatResult

__all__ = ["LiteLLMBackend"]


def _plain(value: Any) -> Any:
    """A LiteLLM/pydantic object as plain JSON data."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def assistant_message(message: Any) -> dict[str, Any]:
    """OpenAI's assistant message (role, content, tool_calls, reasoning_content) from LiteLLM's."""
    data = _plain(message) or {}
    out: dict[str, Any] = {"role": "assistant", "content": data.get("content")}
    calls = [_plain(c) for c in data.get("tool_calls") or []]
    if calls:
        out["tool_calls"] = [{"id": c.get("id"), "type": c.get("type") or "function",
                              "function": {"name": c["function"].get("name"),
                                           "arguments": c["function"].get("arguments") or "{}"}} for c in calls]
    if data.get("reasoning_content"):
        out["reasoning_content"] = data["reasoning_content"]
    return out


class LiteLLMBackend:
    """An external model ``model`` (a LiteLLM model string, e.g. ``"openai/gpt-4o-mini"``).

    ``model_name`` is the id the gateway serves it under (default: ``model``); ``api_base`` and
    ``api_key`` go to LiteLLM; ``extra`` is passed to every ``acompletion`` call."""

    name = "litellm"
    trainable = False  # answers chat messages (generate_chat), not token ids
    accepts_images = False  # (GenerateRequest fields: it takes no token-id requests; messages go as they are)
    accepts_grammar = False
    accepts_prompt_logprobs = False
    weights_in_memory = False
    releases_cache = False
    reports_engine_stats = False
    tokenizer = None
    model_path: str | None = None  # an external model: no directory, no token ids

    def __init__(self, model: str, *, model_name: str | None = None, api_base: str | None = None,
                 api_key: str | None = None, max_context: int = 128_000, timeout: float = 600.0, retries: int = 2,
                 extra: dict[str, Any] | None = None) -> None:
        self.model = model
        self.model_name = model_name or model
        self.api_base, self.api_key = api_base, api_key
        self.max_context = max_context
        self.timeout, self.retries = timeout, retries
        self.extra = dict(extra or {})
        self._litellm: Any = None
        self._paused = False
        self.calls = 0

    @property
    def policy_version(self) -> int:
        return 0  # an external model: its weights never change here

    async def start(self) -> None:
        if self._litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm  # slow (seconds): only when the backend is used

            self._litellm = litellm

    async def close(self) -> None:
        return None

    async def ready(self) -> bool:
        return self._litellm is not None and not self._paused

    # -- chat -----------------------------------------------------------------------------

    def completion_kwargs(self, messages: list[dict[str, Any]], sampling: SamplingParams,
                          tools: list[dict[str, Any]] | None, tool_choice: Any, n: int) -> dict[str, Any]:
        """The ``litellm.acompletion`` arguments for one chat call."""
        kw: dict[str, Any] = {
            "model": self.model, "messages": messages, "temperature": sampling.temperature,
            "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens or None, "n": n, "timeout": self.timeout,
            "num_retries": self.retries, "drop_params": True,
        }
        if self.api_base:
            kw["api_base"] = self.api_base
        if self.api_key:
            kw["api_key"] = self.api_key
        if sampling.stop:
            kw["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            kw["seed"] = sampling.seed
        if sampling.top_k > 0:
            kw["top_k"] = sampling.top_k
        if sampling.top_logprobs:
            kw.update(logprobs=True, top_logprobs=sampling.top_logprobs)
        if tools:
            kw["tools"] = tools
            if tool_choice is not None:
                kw["tool_choice"] = tool_choice
        kw.update(self.extra)
        return kw

    async def generate_chat(self, messages: list[dict[str, Any]], *, sampling: SamplingParams,
                            tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
                            n: int = 1) -> list[ChatResult]:
        """Ask the external model; one :class:`ChatResult` per choice."""
        await self.start()
        while self._paused:
            await asyncio.sleep(0.01)
        self.calls += 1
        try:
            response = await self._litellm.acompletion(**self.completion_kwargs(messages, sampling, tools,
                                                                                tool_choice, n))
        except Exception as exc:
            raise self._error(exc) from exc
        usage = _plain(getattr(response, "usage", None)) or {}
        results = []
        for choice in response.choices:
            logprobs = None
            content = getattr(getattr(choice, "logprobs", None), "content", None)
            if content:
                logprobs = [float(_plain(t)["logprob"]) for t in content]
            results.append(ChatResult(
                message=assistant_message(choice.message), finish_reason=choice.finish_reason or "stop",
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                model=str(getattr(response, "model", None) or self.model), logprobs=logprobs, usage=usage))
        return results

    def _error(self, exc: Exception) -> BackendError:
        status = getattr(exc, "status_code", None)
        message = f"{self.model} via LiteLLM: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
        transient = ("RateLimitError", "ServiceUnavailableError", "InternalServerError", "APIConnectionError",
                     "Timeout", "BadGatewayError")
        if type(exc).__name__ in transient or status in (408, 429, 500, 502, 503, 504):
            return BackendUnavailable(message, retry_after=2.0)
        if status in (400, 413, 422):
            return BackendError(message, status_code=400)
        return BackendError(message)

    # -- the token-id protocol: not available ---------------------------------------------

    def _refuse(self) -> BackendError:
        return BackendError(
            f"the litellm backend ({self.model}) answers chat messages, not token ids: the gateway must call "
            "generate_chat() (external models are not trainable)", status_code=400)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        raise self._refuse()

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]:
        raise self._refuse()

    async def update_weights(self, path: str) -> int:
        raise ValueError(f"the litellm backend serves an external model ({self.model}); it has no weights to update")

    async def pause(self) -> None:
        self._paused = True

    async def resume(self) -> None:
        self._paused = False

    def __repr__(self) -> str:
        return f"LiteLLMBackend({self.model!r}, api_base={self.api_base!r}, started={self._litellm is not None})"

