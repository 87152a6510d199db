"""The backend interface: token ids in; token ids, logprobs and a finish reason out.

Every backend (local engine, SGLang, vLLM, LiteLLM) implements :class:`Backend`; the gateway
never talks to a model any other way. The requests, results and errors it speaks are the generation
vocabulary of :mod:`agentr1.core.generation` (below the gateway: the embedded engine speaks it too);
import them from there, the one place that names them.

What a backend can do beyond that is declared, not guessed: every backend sets the ability flags of
:class:`Backend` (``accepts_images``, ``weights_in_memory``, ...), and a flag that promises an operation names the
small protocol the backend must then implement (:func:`promised_operations`). :func:`check_backend` holds a backend to its
word where it is handed to the gateway (``create_app``, ``EmbeddedGateway``) and returns its optional operations
typed (:class:`BackendAbilities`), so no caller probes a backend per call.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams, StreamDelta

__all__ = ["Backend", "BackendAbilities", "CacheRelease", "ChatGeneration", "ChatResult", "EngineStatsReport",
           "WeightsFromTensors", "check_backend", "engine_counters", "promised_operations", "tokenizer_dir"]


@runtime_checkable
class Backend(Protocol):
    name: str  # "local", "sglang", ...
    model_name: str  # the id served under /v1/models
    model_path: str | None  # the model directory it was started on (its tokenizer decodes the ids); None: external
    max_context: int  # prompt + completion tokens the model accepts
    # what the gateway renders prompts with: a HF tokenizer or a local model directory; None: the settings' model
    # (the embedded engine serves it), or nothing to render (an external model)
    tokenizer: Any
    # -- abilities, declared by every backend -------------------------------------------------------------------
    trainable: bool  # token ids in and out; False: an external model that answers chat messages (ChatGeneration)
    accepts_images: bool  # GenerateRequest.multimodal is fed to the model; the gateway refuses images (400) otherwise
    accepts_grammar: bool  # GenerateRequest.grammar: constrained decoding; the gateway sends it to no other backend
    accepts_prompt_logprobs: bool  # GenerateRequest.prompt_logprobs: the prompt's tokens scored (echo with logprobs)
    weights_in_memory: bool  # a trainer's sync hands it tensors (WeightsFromTensors), never a directory
    releases_cache: bool  # frees its KV cache on request, between rollouts (CacheRelease)
    reports_engine_stats: bool  # its engine's counters and queue, for /metrics and a trainer (EngineStatsReport)

    @property
    def policy_version(self) -> int: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ready(self) -> bool: ...

    async def generate(self, request: GenerateRequest) -> GenerateResult: ...

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]: ...

    async def update_weights(self, path: str) -> int:
        """Load new weights from ``path``; returns the new policy version."""
        ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...


@dataclass(slots=True)
class ChatResult:
    """One choice of an external model's answer, in OpenAI's shapes."""

    message: dict[str, Any]  # {"role": "assistant", "content", "tool_calls"?, "reasoning_content"?}
    finish_reason: str  # OpenAI's: stop | length | tool_calls | content_filter
    prompt_tokens: int
    completion_tokens: int
    model: str  # the model the provider says answered
    logprobs: list[float] | None = None  # per output token, when the provider returns them (not trainable)
    usage: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ChatGeneration(Protocol):
    """A backend that answers chat messages rather than token ids (``trainable`` is False)."""

    async def generate_chat(self, messages: list[dict[str, Any]], *, sampling: SamplingParams,
                            tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
                            n: int = 1) -> list[ChatResult]: ...


@runtime_checkable
class WeightsFromTensors(Protocol):
    """A backend that loads weights handed over in memory (``weights_in_memory``)."""

    async def update_weights_from_tensors(self, tensors: Mapping[str, Any]) -> int:
        """Load the named ``tensors`` (HF names); returns the new policy version."""
        ...


@runtime_checkable
class CacheRelease(Protocol):
    """A backend whose KV cache can be given back while it runs no row (``releases_cache``)."""

    async def release_cache(self) -> int:
        """Free the cache if idle; returns the bytes freed (0: nothing to free here)."""
        ...


@runtime_checkable
class EngineStatsReport(Protocol):
    """A backend that reports its engine's load and counters (``reports_engine_stats``)."""

    @property
    def stats(self) -> Any:
        """The engine's counters: a dataclass of numbers (``agentr1.engine.EngineStats``)."""
        ...

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the engine's batch."""
        ...

    @property
    def served_on(self) -> tuple[str, str]:
        """The dtype and the device the engine runs on (``auto`` resolved), e.g. ``("float32", "cpu")``."""
        ...

    def refresh_stats(self) -> None:
        """Bring :attr:`stats` up to date (an engine process's counters include its other clients' rows)."""
        ...


@dataclass(frozen=True, slots=True)
class BackendAbilities:
    """A backend's optional operations, typed: each is the backend itself when it declares the ability, else None."""

    chat: ChatGeneration | None = None  # an external model (``trainable`` False) answers through generate_chat
    cache: CacheRelease | None = None
    engine_stats: EngineStatsReport | None = None


def _members(protocol: type) -> list[str]:
    """The attributes and methods ``protocol`` asks for."""
    return sorted(n for n in {*vars(protocol).get("__annotations__", {}), *vars(protocol)} if not n.startswith("_"))


def _flags(backend: Backend) -> dict[str, Any]:
    return {"trainable": backend.trainable, "accepts_images": backend.accepts_images,
            "accepts_grammar": backend.accepts_grammar, "accepts_prompt_logprobs": backend.accepts_prompt_logprobs,
            "weights_in_memory": backend.weights_in_memory, "releases_cache": backend.releases_cache,
            "reports_engine_stats": backend.reports_engine_stats}


def promised_operations(backend: Backend) -> dict[type, str]:
    """The protocols ``backend``'s flags promise, each with the declaration that promises it."""
    promises = {ChatGeneration: ("trainable = False", not backend.trainable),
                WeightsFromTensors: ("weights_in_memory = True", backend.weights_in_memory),
                CacheRelease: ("releases_cache = True", backend.releases_cache),
                EngineStatsReport: ("reports_engine_stats = True", backend.reports_engine_stats)}
    return {protocol: said for protocol, (said, promised) in promises.items() if promised}


def check_backend(backend: object) -> BackendAbilities:
    """Refuse (TypeError) a ``backend`` that does not implement :class:`Backend`, declares an ability that is not True
    or False, or declares an operation it does not implement; else return its optional operations, typed."""
    kind = type(backend).__name__
    if not isinstance(backend, Backend):
        missing = ", ".join(sorted(set(_members(Backend)) - set(dir(backend))))
        raise TypeError(f"{kind} is not a gateway backend: it lacks {missing} (agentr1.gateway.backends.Backend; "
                        "every backend declares its abilities)")
    for flag, value in _flags(backend).items():
        if not isinstance(value, bool):
            raise TypeError(f"{kind}.{flag} must be True or False, not {value!r}")
    for protocol, said in promised_operations(backend).items():
        if not isinstance(backend, protocol):
            lacking = ", ".join(sorted(set(_members(protocol)) - set(dir(backend))))
            raise TypeError(f"{kind} declares {said} but does not implement {protocol.__name__}: it lacks {lacking}")
    return BackendAbilities(
        chat=backend if isinstance(backend, ChatGeneration) and not backend.trainable else None,
        cache=backend if isinstance(backend, CacheRelease) and backend.releases_cache else None,
        engine_stats=backend if isinstance(backend, EngineStatsReport) and backend.reports_engine_stats else None)


def engine_counters(engine: EngineStatsReport) -> dict[str, float]:
    """The numeric fields of ``engine``'s counters, as floats (not its text ones: the graphs' shapes)."""
    stats = engine.stats
    return {f.name: float(value) for f in fields(stats)
            if isinstance(value := getattr(stats, f.name), int | float) and not isinstance(value, bool)}


def tokenizer_dir(tokenizer: Any) -> str | None:
    """The directory a backend's ``tokenizer`` (a local model directory, or a HF tokenizer loaded from one) names; None
    when there is none (no tokenizer, or one built in memory)."""
    if isinstance(tokenizer, str | os.PathLike):
        return str(tokenizer)
    return getattr(tokenizer, "name_or_path", None) or None
