"""The generation vocabulary: token ids in; token ids, logprobs and a finish reason out.

The embedded engine (:mod:`agentr1.engine`) and every backend of the gateway (:mod:`agentr1.gateway.backends`:
the engine's adapter, SGLang, vLLM, LiteLLM) speak it, so it lives below both: a :class:`GenerateRequest` with
its :class:`SamplingParams` (and a :class:`GrammarSpec` for constrained decoding), answered by a
:class:`GenerateResult` (or :class:`StreamDelta` pieces of one), or one of the errors below.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agentr1.core.rendering import MultimodalInputs

__all__ = ["BackendError", "BackendUnavailable", "ContextLengthExceeded", "FinishReason", "GenerateRequest",
           "GenerateResult", "GrammarSpec", "SamplingParams", "StreamDelta", "TokenLogprob"]

FinishReason = Literal["stop", "length", "abort"]


class BackendError(Exception):
    """The backend failed to answer; ``retry_after`` (seconds) when trying again may help."""

    def __init__(self, message: str, *, retry_after: float | None = None, status_code: int = 502) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status_code = status_code


class BackendUnavailable(BackendError):
    """Temporarily unable to serve (paused, overloaded, starting): answered as 503 + Retry-After."""

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message, retry_after=retry_after, status_code=503)


@dataclass(slots=True)
class SamplingParams:
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = disabled
    stop: list[str] = field(default_factory=list)  # stop strings: generation ends after one appears
    stop_token_ids: list[int] = field(default_factory=list)  # in addition to the model's end tokens
    seed: int | None = None
    top_logprobs: int = 0  # alternatives to return per sampled token (OpenAI `top_logprobs`)

    def copy(self) -> SamplingParams:
        """An independent copy, its lists too (``dataclasses.asdict`` deep-copies field by field: ~0.1 ms a
        call on the gateway's call path)."""
        return replace(self, stop=list(self.stop), stop_token_ids=list(self.stop_token_ids))

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (lists copied), as ``dataclasses.asdict`` gives them."""
        values = {name: getattr(self, name) for name in _SAMPLING_FIELDS}
        values["stop"], values["stop_token_ids"] = list(self.stop), list(self.stop_token_ids)
        return values


_SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams))


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """A constraint on the sampled text (constrained decoding): only tokens that keep the output a prefix
    of the grammar's language may be sampled, and the output ends only where the grammar is complete.

    - ``json_object``: any JSON object. ``json_schema``: a JSON value valid against ``value`` (the schema
      as JSON text). ``regex``: text matching ``value``. ``ebnf``: ``value`` in xgrammar's EBNF (rule
      ``root``).
    - ``tagged_json``: one of ``alternatives``, each ``(text before, JSON Schema as JSON text, text after)``:
      a forced tool call in the renderer's syntax, e.g. ``'{"name": "calc", "arguments": '``, the tool's
      parameters schema, ``'}\\n</tool_call>'`` (the part of the call the prompt already opened is not
      in it). Then up to ``max_more`` further calls, each one of ``more`` (the whole call, from the text
      between two calls on: parallel tool calls), or none.

    Frozen and made of strings: it is its own cache key for compiled grammars."""

    kind: Literal["json_object", "json_schema", "regex", "ebnf", "tagged_json"]
    value: str = ""
    alternatives: tuple[tuple[str, str, str], ...] = ()
    more: tuple[tuple[str, str, str], ...] = ()
    max_more: int = 0


@dataclass(slots=True)
class GenerateRequest:
    prompt_ids: list[int]
    sampling: SamplingParams
    request_id: str = ""
    session_id: str | None = None  # keeps a session on one server (prefix-cache hits) where there are several
    # The prompt's images (a vision-language model): ``agentr1.core.rendering.MultimodalInputs`` with the
    # images' sha256 in prompt order and the model's keyword inputs for them (``pixel_values``, ...), made
    # once per image by the renderer. The prompt ids already hold the expanded image tokens. Only backends
    # with ``accepts_images = True`` take such requests; the gateway refuses them (400) for the others.
    multimodal: MultimodalInputs | None = None
    # Constrained decoding (response_format, forced tool calls); None = free sampling. Backends that take it
    # set ``accepts_grammar = True``; the gateway does not send it to the others.
    grammar: GrammarSpec | None = None
    # Also score the prompt's own tokens (OpenAI ``echo`` with ``logprobs``): ``GenerateResult.prompt_logprobs``. Only
    # backends with ``accepts_prompt_logprobs = True`` take it; the gateway refuses such calls (400) for the others.
    prompt_logprobs: bool = False


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    logprob: float


@dataclass(slots=True)
class GenerateResult:
    """What was sampled. ``output_ids`` are exactly the sampled tokens, including a final end-of-turn
    token or the tokens of a matched stop string; ``logprobs[i]`` is the log-probability of
    ``output_ids[i]`` under the distribution it was sampled from (logits / temperature, before
    top-p/top-k truncation), the quantity verl's actor recomputes. Under a ``grammar`` that distribution is
    the one masked to the tokens the grammar allows and renormalised (see docs/gateway.md: the trainer's
    unmasked recomputation differs on constrained tokens)."""

    output_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_tokens: int
    policy_version: int
    matched_stop: str | int | None = None  # the stop string or token id that ended generation
    top_logprobs: list[list[TokenLogprob]] | None = None
    cached_tokens: int = 0  # prompt tokens served from a reused prefix (prefix cache) instead of prefilled
    # With ``GenerateRequest.prompt_logprobs``: each prompt token's log-probability given the tokens before it (None
    # for the first), as ``logprobs`` are computed, and its ``top_logprobs`` alternatives ([] for the first).
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list[list[TokenLogprob]] | None = None


@dataclass(slots=True)
class StreamDelta:
    """Tokens sampled since the previous delta; the last delta carries ``result``. ``top_logprobs``: each token's
    alternatives, when the request asked for them (``SamplingParams.top_logprobs``); ``prompt_logprobs``: the
    prompt's, when the request asked for them (``GenerateRequest.prompt_logprobs``: backends send them before the
    first token where they can)."""

    token_ids: list[int]
    logprobs: list[float]
    result: GenerateResult | None = None
    top_logprobs: list[list[TokenLogprob]] | None = None
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list[list[TokenLogprob]] | None = None


class ContextLengthExceeded(ValueError):
    """The prompt plus ``max_new_tokens`` does not fit the model's context: answered as 400
    ``context_length_exceeded``."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int, max_context: int) -> None:
        super().__init__(
            f"this model's maximum context length is {max_context} tokens; the request has "
            f"{prompt_tokens} prompt tokens and asks for {max_new_tokens} new tokens"
        )
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.max_context = max_context
