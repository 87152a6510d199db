"""The embedded ``local`` backend: a HF transformers model on CPU or one GPU, batching concurrent
requests (continuous batching: new requests join the running batch at step boundaries).

One worker thread owns the model and runs :class:`~._engine.BatchEngine`; the asyncio side only
queues requests and receives tokens through ``loop.call_soon_threadsafe``, so any number of event
loops may use one backend.

Pausing: :meth:`LocalBackend.pause` stops admitting requests and returns once the requests in
flight have finished; requests that arrive while paused wait in the queue (they are not
rejected) and start after :meth:`LocalBackend.resume`. :meth:`LocalBackend.update_weights` pauses
the same way, so each response is sampled by one policy version. A full queue (``max_queue``)
or a backend that is not started answers :class:`BackendUnavailable`.

CPU threads: ``num_threads`` fixes the worker's torch threads; by default (None) the worker uses one per
core that other work leaves free, chosen again every second (``_cpu_threads.py``): all cores on an idle
machine, fewer beside busy processes (with torch's default 2 threads and one busy process on 2 cores the
engine fell to 0.11-0.15x ``model.generate``, issue 41). :attr:`LocalBackend.cpu_threads` is the number in use.

The engine (``_engine.BatchEngine``) keeps every request in a slot of a static KV cache, samples
all rows at once on the device, replays decode steps from CUDA graphs on a GPU (``cuda_graphs``)
and reuses the cached prefixes of earlier prompts (``prefix_cache``; ``GenerateResult.
cached_tokens`` says how many prompt tokens it served). ``cache_bytes`` bounds the cache (idle
prefixes are evicted first); ``exact`` (default: on the CPU) makes prefix reuse bit-exact;
``compile`` runs the decode step through ``torch.compile`` (fused kernels, then captured in the same
CUDA graphs; two compilations with symbolic shapes, a minute or more of warm-up on a GPU); ``overlap``
(default: on a GPU) queues each decode step before the host reads the previous one's tokens. New weights
drop the cached prefixes. With rows running, small arrivals are admitted in groups (``_admission.py``).

``engine_process``: the worker and the model live in a child process (``_engine_process.py``), with
a GIL of their own; this object queues, pauses and forwards rows and weights (what ``agentr1 train``
uses on a GPU). The process is spawned: a script that starts one needs ``if __name__ == "__main__"``.
Its :attr:`LocalBackend.engine_address` lets backends in other processes share it: ``engine_address=`` makes a
backend that loads no model and sends its rows to that engine (the trainer's gateway processes); it serves the
policy version the engine reports and cannot load weights (the owner does).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ._admission import BURST_MAX_S, BURST_QUIET_S, AdmissionPolicy
from ._cpu_threads import CpuThreads
from ._engine import BatchEngine, EngineStats, Row, end_token_ids, pad_token_id
from ._requests import check_request
from ._sink import Sink
from ._slot_cache import use_grouped_decode_attention
from ._weights import copy_into, read_safetensors
from .base import (
    BackendError,
    BackendUnavailable,
    GenerateRequest,
    GenerateResult,
    StreamDelta,
)

__all__ = ["EngineStats", "LocalBackend"]

log = logging.getLogger(__name__)

def _pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _pick_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


class LocalBackend:
    """Serve a HF causal LM from ``model_path`` in this process (see the module docstring)."""

    name = "local"
    trainable = True
    accepts_grammar = True  # GenerateRequest.grammar: constrained decoding (_grammar.py, xgrammar)

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        device: str = "auto",
        dtype: str | torch.dtype = "auto",
        max_batch_size: int = 32,
        max_context: int | None = None,
        max_queue: int = 4096,
        model_name: str | None = None,
        policy_version: int = 0,
        num_threads: int | None = None,
        prefix_cache: bool = True,
        cache_bytes: int | None = None,
        exact: bool | None = None,
        cuda_graphs: bool = True,
        compile: bool = False,
        prefill_budget: int | None = None,
        overlap: bool | None = None,
        engine_process: bool = False,
        engine_address: Any = None,
    ) -> None:
        from transformers import AutoConfig

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.model_path = Path(model_path)
        config = AutoConfig.from_pretrained(self.model_path)
        self.config = config
        self.model_name = model_name or self.model_path.name
        text = config.get_text_config()  # the config itself for a causal LM; a VLM's text model
        self.max_context = int(max_context or text.max_position_embeddings)
        self.vocab_size = int(text.vocab_size)
        # a vision-language model: requests may carry images (GenerateRequest.multimodal, see _images.py)
        self.image_token_id = getattr(config, "image_token_id", None) if hasattr(config, "vision_config") else None
        self.accepts_images = self.image_token_id is not None
        self.device = _pick_device(device)
        self.dtype = _pick_dtype(dtype, self.device)
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.num_threads = num_threads  # CPU threads of the worker's torch ops (None: one per free core)
        self.engine_options: dict[str, Any] = {
            "prefix_cache": prefix_cache, "cache_bytes": cache_bytes, "exact": exact, "cuda_graphs": cuda_graphs,
            "compile": compile, "prefill_budget": prefill_budget, "overlap": overlap,
        }
        # engine_process: the engine runs in a child process of its own (_engine_process.py), the same
        # LocalBackend there on these arguments; this one queues, pauses and forwards
        self.engine_process = engine_process or engine_address is not None
        self.shared_engine = engine_address  # an EngineAddress: another process's engine process, shared
        self._child_options: dict[str, Any] = {
            "device": str(self.device), "dtype": self.dtype, "max_batch_size": max_batch_size,
            "max_context": self.max_context, "max_queue": max_queue, "model_name": self.model_name,
            "num_threads": num_threads, **self.engine_options}
        self._remote: Any = None  # the EngineProcess, with engine_process
        self.stats = EngineStats()
        self.model: Any = None
        self.tokenizer: Any = None
        self._engine: BatchEngine | None = None
        self._grammars: Any = None  # _grammar.GrammarCache, made on the first constrained request
        self._policy_version = policy_version  # a resumed trainer serves its checkpoint's version
        self._cv = threading.Condition()
        self._queue: collections.deque[Row] = collections.deque()
        self._model_lock = threading.Lock()  # held by the worker for each step and by weight loads
        self._idle = threading.Event()
        self._idle.set()
        self._paused = False
        self._updating = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._admission = AdmissionPolicy()
        self._threads = CpuThreads(num_threads, choose=self.device.type == "cpu")

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._policy_version

    async def start(self) -> None:
        """Load the model and start the worker (idempotent)."""
        await asyncio.to_thread(self.start_sync)

    def start_sync(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            from tokenizers import Tokenizer
            from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

            started = time.monotonic()
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            if self.engine_process:
                self._start_process()
                return
            auto = AutoModelForImageTextToText if self.accepts_images else AutoModelForCausalLM
            model = auto.from_pretrained(self.model_path, dtype=self.dtype, attn_implementation="sdpa")
            self.model = model.to(self.device).eval()
            use_grouped_decode_attention(self.model)
            # the worker's own copy (decode only): callers may use self.tokenizer meanwhile
            decoder = Tokenizer.from_str(self.tokenizer.backend_tokenizer.to_str())

            def decode(ids: list[int]) -> str:
                return decoder.decode(ids, skip_special_tokens=False)

            self._engine = BatchEngine(
                self.model,
                eos_ids=end_token_ids(self.model, self.tokenizer),
                pad_id=pad_token_id(self.tokenizer),
                decode=decode,
                max_context=self.max_context,
                stats=self.stats,
                max_batch_size=self.max_batch_size,
                **self.engine_options,
            )
            self._engine.policy_version = self._policy_version
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="agentr1-local-engine", daemon=True)
            self._thread.start()
            log.info(
                "local backend: %s on %s (%s) ready in %.1f s",
                self.model_name,
                self.device,
                self.dtype,
                time.monotonic() - started,
            )

    def _start_process(self) -> None:
        from ._engine_process import EngineClient, EngineProcess, feed

        started = time.monotonic()
        if self.shared_engine is not None:
            self._remote = EngineClient(self.shared_engine, self.stats, self._wake, self._set_version)
        else:
            self._remote = EngineProcess(str(self.model_path), {**self._child_options, "policy_version":
                                         self._policy_version}, self.stats, self._wake)
        self._stopping = False
        self._thread = threading.Thread(target=feed, args=(self, self._remote), name="agentr1-engine-feeder",
                                        daemon=True)
        self._thread.start()
        where = "shared" if self.shared_engine is not None else f"in process {self._remote.process.pid}"
        log.info("local backend: %s on %s (%s) %s, ready in %.1f s", self.model_name, self.device, self.dtype, where,
                 time.monotonic() - started)

    def _set_version(self, version: int) -> None:
        self._policy_version = version

    @property
    def cpu_threads(self) -> int:
        """The torch threads the worker uses now (on a GPU: torch's default, not changed)."""
        return self._threads.threads

    @property
    def engine_address(self) -> Any:
        """Where backends of other processes connect to share this one's engine process (``engine_address=``);
        None unless it started one."""
        return getattr(self._remote, "address", None)

    def refresh_stats(self) -> None:
        """Bring :attr:`stats` up to date: an engine process's counters include its other clients' rows."""
        if self._remote is not None:
            self._remote.refresh_stats()

    async def close(self) -> None:
        """Stop the worker: running requests end with ``finish_reason="abort"``, queued ones fail."""
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        thread = self._thread
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if thread is not None:
            thread.join()
        self._thread = None

    async def ready(self) -> bool:
        """Loaded, worker alive (and the engine process, with ``engine_process``), not paused or updating."""
        thread = self._thread
        return (thread is not None and thread.is_alive() and not self._stopping and not self._is_paused()
                and (self._remote is None or self._remote.alive()))

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def _cancel(self, row: Row) -> None:
        row.cancelled = True
        if self._remote is not None:
            self._remote.cancel(row)

    async def _grammar_of(self, request: GenerateRequest) -> Any:
        """The row's grammar: compiled here, or the spec the engine process compiles."""
        if request.grammar is None or self._remote is not None:
            return request.grammar
        return await asyncio.to_thread(self._row_grammar, request)

    # -- generation -----------------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        grammar = await self._grammar_of(request)
        row, sink = self._submit(request, streaming=False, grammar=grammar)
        assert sink.future is not None
        try:
            return await sink.future
        except asyncio.CancelledError:
            self._cancel(row)
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
            self._cancel(row)  # no-op when finished; stops the row if the consumer left early

    def validate(self, request: GenerateRequest) -> None:
        """Raise ValueError (ContextLengthExceeded for length) for requests the engine cannot run."""
        check_request(request, vocab_size=self.vocab_size, max_context=self.max_context, model_name=self.model_name,
                      image_token_id=self.image_token_id)

    def _row_grammar(self, request: GenerateRequest) -> Any:
        """The request's grammar matcher (compiled once per spec; compiling takes up to seconds, off the loop)."""
        from ._grammar import GrammarCache

        assert request.grammar is not None
        with self._start_lock:
            if self._engine is None:
                raise BackendUnavailable("the local backend is not running", retry_after=5.0)
            if self._grammars is None:
                self._grammars = GrammarCache(self.tokenizer, self.vocab_size, self._engine.eos_ids)
        try:
            return self._grammars.row(request.grammar, request.sampling.stop_token_ids)
        except ValueError as exc:
            raise BackendError(str(exc), status_code=400) from exc

    def _submit(self, request: GenerateRequest, *, streaming: bool, grammar: Any = None) -> tuple[Row, Sink]:
        self.validate(request)
        sink = Sink(asyncio.get_running_loop(), streaming)
        row = Row(list(request.prompt_ids), request.sampling, sink, request_id=request.request_id,
                  multimodal=request.multimodal, grammar=grammar)
        return self.enqueue(row), sink

    def enqueue(self, *rows: Row) -> Row:
        """Queue validated rows for the worker, all at once (BackendUnavailable: not running, or the queue
        is full); returns the first."""
        with self._cv:
            if self._thread is None or self._stopping:
                raise BackendUnavailable("the local backend is not running", retry_after=5.0)
            if len(self._queue) + len(rows) > self.max_queue:
                raise BackendUnavailable("the local backend queue is full", retry_after=1.0)
            now = time.perf_counter()
            for row in rows:
                row.queued_at = now
            self._queue.extend(rows)
            self._cv.notify_all()
        return rows[0]

    # -- pause, resume, weights -----------------------------------------------------------

    async def pause(self) -> None:
        """Stop admitting requests; returns when the requests in flight have finished."""
        with self._cv:
            self._paused = True
        await self._wait_idle()

    async def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    async def update_weights(self, path: str) -> int:
        """Load weights from a HF directory or ``.safetensors`` file; returns the new version.

        Waits for the requests in flight (new ones queue meanwhile), so every response comes
        from one policy version. A missing path or mismatched weights raise and change nothing."""
        tensors = await asyncio.to_thread(read_safetensors, path)
        return await self.update_weights_from_tensors(tensors)

    async def update_weights_from_tensors(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Same as :meth:`update_weights` with tensors in memory (an in-process trainer)."""
        with self._holding_new_rows():
            await self._wait_idle()
            return await asyncio.to_thread(self._load_tensors, tensors)

    def _load_tensors(self, tensors: Mapping[str, torch.Tensor]) -> int:
        version = self._policy_version + 1
        if self._remote is not None:
            self._remote.update_weights(tensors, version)  # the child's load_weights
            self._policy_version = version
        else:
            self.load_weights(tensors, version)
        log.info("local backend: weights updated, policy version %d", self._policy_version)
        return self._policy_version

    def load_weights(self, tensors: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``tensors`` into the model in place (the engine's CUDA graphs see them) as ``version``."""
        with self._model_lock:
            if self.model is None:
                raise BackendUnavailable("the local backend is not started", retry_after=5.0)
            copy_into(self.model, tensors)
            self._policy_version = version
            if self._engine is not None:
                self._engine.forget_prefixes()  # their keys and values came from the old weights
                self._engine.policy_version = version
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the tensors may be the trainer's (CUDA IPC): copied now

    def load_weights_when_idle(self, tensors: Mapping[str, torch.Tensor], version: int) -> None:
        """:meth:`load_weights` once the rows running now have finished, holding new ones back meanwhile (the
        engine process: its clients' rows are not paused by the owner)."""
        with self._holding_new_rows():
            self._idle.wait()
            self.load_weights(tensors, version)

    @contextlib.contextmanager
    def _holding_new_rows(self) -> Iterator[None]:
        """No new rows are admitted inside (a weight update): they wait in the queue until it ends."""
        with self._cv:
            self._updating += 1
        try:
            yield
        finally:
            with self._cv:
                self._updating -= 1
                self._cv.notify_all()

    def _is_paused(self) -> bool:
        return self._paused or self._updating > 0

    async def _wait_idle(self) -> None:
        while not self._idle.is_set():
            await asyncio.sleep(0.005)

    # -- the worker -----------------------------------------------------------------------

    def _run(self) -> None:
        engine = self._engine
        assert engine is not None
        self._threads.start()
        self._warm_up()
        while True:
            with self._cv:
                while not self._stopping and not engine.rows and (self._is_paused() or not self._queue):
                    self._idle.set()
                    self._cv.wait()
                if self._stopping:
                    break
                if not engine.rows and not self._is_paused():
                    self._await_burst()
                admitted: list[Row] = []
                if not self._is_paused() and self._admit_now(engine):
                    while self._queue and len(engine.rows) + len(admitted) < self.max_batch_size:
                        row = self._queue.popleft()
                        if not row.cancelled:
                            admitted.append(row)
                if admitted or engine.rows:
                    self._idle.clear()
            if admitted or engine.rows:
                self._threads.adjust()
            started = time.perf_counter()
            try:
                with self._model_lock, torch.inference_mode():
                    if admitted:
                        engine.prefill(admitted)
                    if engine.rows:
                        engine.decode()
            except Exception:  # the engine fails its own rows; this only keeps the worker alive
                log.exception("local engine: unexpected error in the worker loop")
                engine.reset()
            elapsed = time.perf_counter() - started
            self.stats.busy_s += elapsed
            if admitted:
                self._admission.record(elapsed)
        self._shutdown(engine)

    def _await_burst(self) -> None:
        """Holding ``_cv``, with nothing running: wait while more requests keep arriving (``_admission.py``)."""
        deadline = time.perf_counter() + BURST_MAX_S
        size = len(self._queue)
        while not self._stopping and time.perf_counter() < deadline:
            self._cv.wait(BURST_QUIET_S)
            if len(self._queue) == size:
                return
            size = len(self._queue)

    def _admit_now(self, engine: BatchEngine) -> bool:
        """Whether to prefill the queued rows before the next decode step (_admission.py)."""
        return self._admission.admit_now(self._queue, len(engine.rows), self.max_batch_size)

    def _warm_up(self) -> None:
        """One small forward on this thread: its first use of the CPU thread pool is slow."""
        try:
            with self._model_lock, torch.inference_mode():
                self.model(
                    input_ids=torch.tensor([[pad_token_id(self.tokenizer)] * 2], device=self.device), logits_to_keep=1
                )
        except Exception:
            log.exception("local engine: warm-up forward failed")

    def _shutdown(self, engine: BatchEngine) -> None:
        with self._model_lock:
            engine.abort_all()
        with self._cv:
            queued, self._queue = list(self._queue), collections.deque()
            self._idle.set()
        for row in queued:
            row.sink.error(BackendUnavailable("the local backend was closed", retry_after=5.0))
