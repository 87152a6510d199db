"""The embedded ``local`` backend: the :class:`~agentr1.engine.Engine` (a HF transformers model on CPU or one GPU,
batching concurrent requests) behind the :class:`~.base.Backend` interface.

This is the engine's adapter, as ``sglang.py`` and ``vllm.py`` are the servers' clients: it checks each request
against the model, hands it to the engine as a row whose sink (``_sink.py``) delivers the tokens to the calling
event loop through ``loop.call_soon_threadsafe`` (so any number of event loops may use one backend), and runs the
engine's blocking calls off the loop. How the engine runs is one :class:`~agentr1.engine.EngineOptions`
(``GatewaySettings.engine``, the trainer's ``rollout.engine``), handed to the engine unchanged.

Pausing: :meth:`LocalBackend.pause` stops admitting requests and returns once the requests in flight have finished;
requests that arrive while paused wait in the queue (they are not rejected) and start after
:meth:`LocalBackend.resume`. :meth:`LocalBackend.update_weights` pauses the same way, so each response is sampled by
one policy version. A full queue (``max_queue``) or a backend that is not started answers
:class:`BackendUnavailable`.

``engine_process``: the engine runs in a child process of its own (what ``agentr1 train`` uses on a GPU; the
process is spawned: a script that starts one needs ``if __name__ == "__main__"``). Its
:attr:`LocalBackend.engine_address` lets backends in other processes share it: ``engine_address=`` makes a backend
that loads no model and sends its rows to that engine (the trainer's gateway processes); it serves the policy
version the engine reports and cannot load weights (the owner does).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from agentr1.core.generation import GenerateRequest, GenerateResult, StreamDelta
from agentr1.engine import Engine, EngineOptions, EngineStats, Row, check_request, read_safetensors

from ._sink import Sink

__all__ = ["LocalBackend"]


class LocalBackend:
    """Serve the HF model at ``model_path`` with the embedded engine on ``options`` (see the module docstring);
    ``model_name``: the id served (default: the model's folder name); ``policy_version``: the version served until
    weights arrive (a resumed trainer's checkpoint's)."""

    name = "local"
    weights_in_memory = True  # a trainer's sync hands it tensors (update_weights_from_tensors), never a directory
    trainable = True
    accepts_grammar = True  # GenerateRequest.grammar: constrained decoding (agentr1.engine's grammar masks, xgrammar)
    accepts_prompt_logprobs = True  # GenerateRequest.prompt_logprobs: a forward over the prompt (engine/prompt_logprobs)
    releases_cache = True  # release_cache: an idle CPU engine's KV cache, before a trainer's update
    reports_engine_stats = True  # stats, queue_depth, served_on
    tokenizer = None  # the gateway renders with the settings' model, the one this engine loads

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        options: EngineOptions | None = None,
        *,
        model_name: str | None = None,
        policy_version: int = 0,
        engine_process: bool = False,
        engine_address: Any = None,
    ) -> None:
        self.engine = Engine(model_path, options, policy_version=policy_version, process=engine_process,
                             address=engine_address)
        self.model_name = model_name or Path(model_path).name
        self.model_path: str | None = str(model_path)
        self.max_context = self.engine.max_context
        # a vision-language model: requests may carry images (GenerateRequest.multimodal)
        self.accepts_images = self.engine.image_token_id is not None

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    @property
    def stats(self) -> EngineStats:
        """The engine's counters (``/metrics``, the trainer's rollout metrics)."""
        return self.engine.stats

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the engine's batch (``/metrics``)."""
        return self.engine.queue_depth

    @property
    def engine_address(self) -> Any:
        """Where backends of other processes connect to share this one's engine process (``engine_address=``);
        None unless it started one."""
        return self.engine.address

    @property
    def served_on(self) -> tuple[str, str]:
        """The dtype and the device the engine runs on, ``auto`` resolved (e.g. ``("bfloat16", "cuda:0")``)."""
        return str(self.engine.dtype).removeprefix("torch."), str(self.engine.device)

    def refresh_stats(self) -> None:
        """Bring :attr:`stats` up to date: an engine process's counters include its other clients' rows."""
        self.engine.refresh_stats()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the model and start the engine (idempotent)."""
        await asyncio.to_thread(self.engine.start)

    async def close(self) -> None:
        """Stop the engine: running requests end with ``finish_reason="abort"``, queued ones fail."""
        await asyncio.to_thread(self.engine.close)

    async def ready(self) -> bool:
        """Loaded, engine alive, not paused or updating."""
        return self.engine.ready()

    # -- generation -----------------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        grammar = await self._grammar_of(request)
        row, sink = self._submit(request, streaming=False, grammar=grammar)
        assert sink.future is not None
        try:
            return await sink.future
        except asyncio.CancelledError:
            self.engine.cancel(row)
            raise

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]:
        """Deltas per decode step; the last one carries the result. The request is validated
        here (errors raise at call time) and queued when iteration starts."""
        self.validate(request)
        return self._stream(request)

    async def _stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]:
        grammar = await self._grammar_of(request)
        row, sink = self._submit(request, streaming=True, grammar=grammar)
        queue = sink.queue
        assert queue is not None
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.result is not None:
                    return
        finally:
            self.engine.cancel(row)  # no-op when finished; stops the row if the consumer left early

    def validate(self, request: GenerateRequest) -> None:
        """Raise ValueError (ContextLengthExceeded for length) for requests the engine cannot run."""
        check_request(request, vocab_size=self.engine.vocab_size, max_context=self.max_context,
                      model_name=self.model_name, image_token_id=self.engine.image_token_id)

    async def _grammar_of(self, request: GenerateRequest) -> Any:
        """The row's grammar: compiled here (off the loop: up to seconds), or the spec the engine process compiles."""
        if request.grammar is None or self.engine.process:
            return request.grammar
        return await asyncio.to_thread(self.engine.row_grammar, request)

    def _submit(self, request: GenerateRequest, *, streaming: bool, grammar: Any = None) -> tuple[Row, Sink]:
        self.validate(request)
        sink = Sink(asyncio.get_running_loop(), streaming)
        row = Row(list(request.prompt_ids), request.sampling, sink, request_id=request.request_id,
                  multimodal=request.multimodal, grammar=grammar, prompt_logprobs=request.prompt_logprobs)
        return self.engine.enqueue(row), sink

    # -- pause, resume, weights -----------------------------------------------------------

    async def pause(self) -> None:
        """Stop admitting requests; returns when the requests in flight have finished."""
        self.engine.pause()
        await self._wait_idle()

    async def resume(self) -> None:
        self.engine.resume()

    async def update_weights(self, path: str) -> int:
        """Load weights from a HF directory or ``.safetensors`` file; returns the new version.

        Waits for the requests in flight (new ones queue meanwhile), so every response comes
        from one policy version. A missing path or mismatched weights raise and change nothing."""
        tensors = await asyncio.to_thread(read_safetensors, path)
        return await self.update_weights_from_tensors(tensors)

    async def update_weights_from_tensors(self, tensors: Mapping[str, Any]) -> int:
        """Same as :meth:`update_weights` with tensors in memory (an in-process trainer)."""
        with self.engine.holding_new_rows():
            await self._wait_idle()
            return await asyncio.to_thread(self.engine.update_weights, tensors)

    async def release_cache(self) -> int:
        """Free the engine's KV cache while no row runs (:meth:`Engine.release_cache`); returns the bytes freed."""
        return await asyncio.to_thread(self.engine.release_cache)

    async def _wait_idle(self) -> None:
        while not self.engine.idle():
            await asyncio.sleep(0.005)
