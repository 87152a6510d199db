"""The requests in flight in the local engine and the engine's counters (see :mod:`.batch`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agentr1.core.generation import FinishReason, GenerateResult, SamplingParams, TokenLogprob

__all__ = ["EngineStats", "Row", "Sink", "end_token_ids", "pad_token_id"]


class Sink(Protocol):
    """Where a row's tokens go (the asyncio side); called from the worker thread."""

    def delta(self, token_ids: list[int], logprobs: list[float], tops: list[Any] | None = None) -> None: ...

    def prompt(self, logprobs: list[float | None], tops: list[list[TokenLogprob]]) -> None:
        """The prompt's own log-probabilities (a row with ``prompt_logprobs``), before its first token."""
        ...

    def result(self, result: GenerateResult, token_ids: list[int], logprobs: list[float]) -> None: ...

    def error(self, exc: BaseException) -> None: ...


@dataclass(eq=False)
class Row:
    """One request in flight."""

    prompt_ids: list[int]
    sampling: SamplingParams
    sink: Sink
    request_id: str = ""
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[TokenLogprob]] | None = None
    streamed: int = 0  # tokens already handed to the sink as deltas
    in_flight: int = 0  # tokens of a decode step launched and not yet read (0 or 1; the engine's overlap)
    cancelled: bool = False  # set from the asyncio side when the caller went away
    finish_reason: FinishReason | None = None
    matched_stop: str | int | None = None
    slot: int = -1  # its slot of the KV cache while in flight
    cached: int = 0  # prompt tokens served from a reused prefix
    key: int = 0  # random key of its sampler
    multimodal: Any = None  # the prompt's images (GenerateRequest.multimodal), embedded at admission
    embeds: Any = None  # while prefilling a prompt with images: its input embeddings (see images.py)
    grammar: Any = None  # constrained decoding: its grammar.RowGrammar (GenerateRequest.grammar), else None
    queued_at: float = 0.0  # time.perf_counter() when it was queued (the admission policy, engine.py)
    prompt_logprobs: bool = False  # also score the prompt's own tokens (GenerateRequest.prompt_logprobs)
    prompt_scores: tuple[list[float | None], list[list[TokenLogprob]]] | None = None  # ... once scored

    def __post_init__(self) -> None:
        if self.sampling.top_logprobs > 0:
            self.top_logprobs = []

    @property
    def stop_window(self) -> int:
        """Tokens to decode to see every stop string that ends at the newest token."""
        longest = max((len(s.encode()) for s in self.sampling.stop), default=0)
        return longest + 2


@dataclass
class EngineStats:
    """Counters of the worker; tests and /metrics read them."""

    forward_passes: int = 0
    prefill_passes: int = 0  # admissions of new rows (each may run several chunked forwards)
    decode_steps: int = 0
    max_batch_rows: int = 0
    requests_finished: int = 0
    requests_failed: int = 0
    tokens_generated: int = 0
    prefill_tokens: int = 0  # prompt tokens run through the model
    cached_tokens: int = 0  # prompt tokens served from reused prefixes instead
    graph_captures: int = 0
    graph_capture_s: float = 0.0  # wall seconds the worker spent capturing decode graphs
    graph_shapes: str = ""  # the captured decode graphs' shapes, "rows x positions", oldest first (the last 32)
    busy_s: float = 0.0  # wall seconds of the worker's steps (prefill + decode); the rest it waited for work
    prefill_s: float = 0.0  # of those, the wall seconds of admissions (prefill forwards, their first tokens)


def end_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end generation: the model's eos ids, the tokenizer's eos and ``<|im_end|>``."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def pad_token_id(tokenizer: Any) -> int:
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return 0
