"""A backend that answers at once with scripted text: for benchmarks of the gateway itself and for
tests that must not depend on what a model samples. It speaks the same token-id interface as
the real backends (its output ids are the tokenizer's encoding of the reply plus the end-of-turn
token, with logprob 0), so everything downstream of it is the production path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from agentr1.core.generation import BackendError, BackendUnavailable, GenerateRequest, GenerateResult, StreamDelta

from .base import tokenizer_dir

Reply = Callable[[list[int]], str]


class InstantBackend:
    name = "instant"
    trainable = True
    accepts_images = False
    accepts_grammar = False
    accepts_prompt_logprobs = False
    weights_in_memory = False
    releases_cache = False
    reports_engine_stats = False

    def __init__(self, tokenizer: Any, reply: str | Reply = "ok", *, model_name: str = "instant",
                 max_context: int = 8192, end_token: str = "<|im_end|>") -> None:
        self.tokenizer = tokenizer
        self._reply = reply if callable(reply) else (lambda _ids, text=reply: text)
        self.model_name = model_name
        self.model_path = tokenizer_dir(tokenizer)
        self.max_context = max_context
        self._end_id = tokenizer.convert_tokens_to_ids(end_token)
        self._version = 0
        self._paused = False
        self.fail_with: BackendError | None = None  # set to make every call fail (fault tests)
        self.die_after_tokens: int | None = None  # set to make streams die mid-way (fault tests)
        self.calls = 0

    @property
    def policy_version(self) -> int:
        return self._version

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ready(self) -> bool:
        return not self._paused

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        if self._paused:
            raise BackendUnavailable("generation is paused", retry_after=1.0)
        ids = self.tokenizer.encode(self._reply(request.prompt_ids), add_special_tokens=False)
        limit = request.sampling.max_new_tokens
        finish = "length" if len(ids) + 1 > limit else "stop"
        out = ids[:limit] if finish == "length" else [*ids, self._end_id]
        return GenerateResult(output_ids=out, logprobs=[0.0] * len(out), finish_reason=finish,
                              prompt_tokens=len(request.prompt_ids), policy_version=self._version)

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]:
        result = await self.generate(request)
        for i, (token_id, logprob) in enumerate(zip(result.output_ids, result.logprobs, strict=True)):
            if self.die_after_tokens is not None and i >= self.die_after_tokens:
                raise BackendError("the engine died mid-stream")
            yield StreamDelta([token_id], [logprob])
        yield StreamDelta([], [], result)

    async def update_weights(self, path: str) -> int:
        self._version += 1
        return self._version

    async def pause(self) -> None:
        self._paused = True

    async def resume(self) -> None:
        self._paused = False
