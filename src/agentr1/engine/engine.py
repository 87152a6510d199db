"""The embedded engine: a HF transformers model on CPU or one GPU, batching concurrent requests (continuous
batching: new requests join the running batch at step boundaries).

:class:`Engine` takes rows (:class:`~.rows.Row`: a request and the sink its tokens go to) from any thread. One
worker thread owns the model and runs :class:`~.batch.BatchEngine`; each row's tokens and its result or error go to
its sink from there (the gateway's ``LocalBackend`` hands them to its event loop).

Pausing: :meth:`Engine.pause` stops admitting rows; rows that arrive while paused wait in the queue (they are not
rejected) and start after :meth:`Engine.resume`. :meth:`Engine.holding_new_rows` holds new rows back the same way
around a weight update, so each response is sampled by one policy version. A full queue (``max_queue``) or an
engine that is not started answers :class:`~agentr1.core.BackendUnavailable`.

Options (:class:`~.options.EngineOptions`). CPU threads: ``threads`` fixes the worker's torch threads; by
default (None) the worker uses at most one per core that other work leaves free, counted again every second
(``cpu_threads.py``; with torch's default 2 threads and one busy process on 2 cores the engine fell to 0.11-0.15x
``model.generate``), and of those counts the one a decode-sized forward ran fastest on at start
(``thread_tuner.py``).
:attr:`Engine.cpu_threads` is the number in use.

The batch (``batch.py``) keeps every request in a slot of a static KV cache, samples all rows at once on the
device, replays decode steps from CUDA graphs on a GPU (``cuda_graphs``) and reuses the cached prefixes of earlier
prompts (``prefix_cache``; ``GenerateResult.cached_tokens`` says how many prompt tokens it served). ``cache_gb``
bounds the cache (idle prefixes are evicted first); ``exact`` (default: on the CPU) makes prefix reuse bit-exact;
``compile`` runs the decode step through ``torch.compile`` (fused kernels, then captured in the same CUDA graphs;
two compilations with symbolic shapes, a minute or more of warm-up on a GPU); ``overlap`` (default: on a GPU) queues
each decode step before the host reads the previous one's tokens. New weights drop the cached prefixes. With rows
running, small arrivals are admitted in groups (``admission.py``).

``process``: the worker and the model live in a child process (``process.py``), with a GIL of their own, which
builds an :class:`Engine` from the same options; this one queues, pauses and forwards rows and weights (what
``agentr1 train`` uses on a GPU). The process is spawned: a script that starts one needs
``if __name__ == "__main__"``. Its :attr:`Engine.address` lets engines in other processes share it: ``address=``
makes an engine that loads no model and sends its rows to that process (the trainer's gateway processes); it serves
the policy version that process reports and cannot load weights (the owner does).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from agentr1.core import release_openmp_threads
from agentr1.core.generation import BackendError, BackendUnavailable, GenerateRequest

from .admission import BURST_MAX_S, BURST_QUIET_S, AdmissionPolicy
from .batch import BatchEngine
from .cpu_threads import CpuThreads
from .grammar import GrammarCache
from .options import EngineOptions
from .packed_linear import pack_linears
from .rows import EngineStats, Row, end_token_ids, pad_token_id
from .slot_cache import use_grouped_decode_attention
from .weights import copy_into

__all__ = ["Engine"]

log = logging.getLogger(__name__)

CALIBRATION_ROWS = 16  # rows of the forward timed to choose the CPU threads (a busy agent batch's size)


def _pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


class Engine:
    """The engine on the HF model at ``model_path`` (see the module docstring); ``policy_version``: the version it
    serves until weights arrive (a resumed trainer's checkpoint's)."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        options: EngineOptions | None = None,
        *,
        policy_version: int = 0,
        process: bool = False,
        address: Any = None,
    ) -> None:
        from transformers import AutoConfig

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.model_path = Path(model_path)
        self.options = options = options or EngineOptions()
        config = AutoConfig.from_pretrained(self.model_path)
        self.config = config
        text = config.get_text_config()  # the config itself for a causal LM; a VLM's text model
        self.max_context = int(options.max_context or text.max_position_embeddings)
        self.vocab_size = int(text.vocab_size)
        # a vision-language model: rows may carry images (GenerateRequest.multimodal, see images.py)
        self.image_token_id = getattr(config, "image_token_id", None) if hasattr(config, "vision_config") else None
        self.device = _pick_device(options.device)
        self.dtype = _pick_dtype(options.dtype, self.device)
        # process: the engine runs in a child process of its own (process.py), an Engine there on these options;
        # this one queues, pauses and forwards
        self.process = process or address is not None
        self.shared = address  # an EngineAddress: another process's engine process, shared
        self._remote: Any = None  # the EngineProcess (or EngineClient), with process
        self.stats = EngineStats()
        self.model: Any = None
        self.tokenizer: Any = None
        self.batch: BatchEngine | None = None  # the running batch (in this process only)
        self._grammars: Any = None  # grammar.GrammarCache, made on the first constrained row
        self._policy_version = policy_version
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
        self._threads = CpuThreads(options.threads, choose=self.device.type == "cpu")

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._policy_version

    def start(self) -> None:
        """Load the model and start the worker (idempotent)."""
        with self._start_lock:
            if self._thread is not None:
                return
            from tokenizers import Tokenizer
            from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

            started = time.monotonic()
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            if self.process:
                self._start_process()
                return
            auto = AutoModelForImageTextToText if self.image_token_id is not None else AutoModelForCausalLM
            model = auto.from_pretrained(self.model_path, dtype=self.dtype, attn_implementation="sdpa")
            self.model = model.to(self.device).eval()
            use_grouped_decode_attention(self.model)
            if self.device.type == "cpu" and self.options.packed_weights and not self.options.compile:
                log.info("local backend: %d linear layers packed for oneDNN", pack_linears(self.model))
            # the worker's own copy (decode only): callers may use self.tokenizer meanwhile
            decoder = Tokenizer.from_str(self.tokenizer.backend_tokenizer.to_str())

            def decode(ids: list[int]) -> str:
                return decoder.decode(ids, skip_special_tokens=False)

            self.batch = BatchEngine(self.model, self.options, eos_ids=end_token_ids(self.model, self.tokenizer),
                                     pad_id=pad_token_id(self.tokenizer), decode=decode, max_context=self.max_context,
                                     stats=self.stats)
            self.batch.policy_version = self._policy_version
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="agentr1-local-engine", daemon=True)
            release_openmp_threads()  # loading ran parallel ops here: an idle pool beside the worker's slows it
            self._thread.start()
            log.info("local backend: %s on %s (%s) ready in %.1f s", self.model_path.name, self.device, self.dtype,
                     time.monotonic() - started)

    def _start_process(self) -> None:
        from .process import EngineClient, EngineProcess, feed

        started = time.monotonic()
        if self.shared is not None:
            self._remote = EngineClient(self.shared, self.stats, self._wake, self._set_version)
        else:
            self._remote = EngineProcess(Engine, str(self.model_path), self.options, self._policy_version,
                                         self.stats, self._wake)
        self._stopping = False
        self._thread = threading.Thread(target=feed, args=(self, self._remote), name="agentr1-engine-feeder",
                                        daemon=True)
        self._thread.start()
        where = "shared" if self.shared is not None else f"in process {self._remote.process.pid}"
        log.info("local backend: %s on %s (%s) %s, ready in %.1f s", self.model_path.name, self.device, self.dtype,
                 where, time.monotonic() - started)

    def _set_version(self, version: int) -> None:
        self._policy_version = version

    @property
    def cpu_threads(self) -> int:
        """The torch threads the worker uses now (on a GPU: torch's default, not changed)."""
        return self._threads.threads

    @property
    def address(self) -> Any:
        """Where engines of other processes connect to share this one's engine process (``address=``); None unless
        it started one."""
        return getattr(self._remote, "address", None)

    @property
    def queue_depth(self) -> int:
        """Rows waiting for the batch (read without the lock)."""
        return len(self._queue)

    def refresh_stats(self) -> None:
        """Bring :attr:`stats` up to date: an engine process's counters include its other clients' rows."""
        if self._remote is not None:
            self._remote.refresh_stats()

    def close(self) -> None:
        """Stop the worker: running rows end with ``finish_reason="abort"``, queued ones fail."""
        thread = self._thread
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if thread is not None:
            thread.join()
        self._thread = None

    def ready(self) -> bool:
        """Loaded, worker alive (and the engine process, with ``process``), not paused or updating."""
        thread = self._thread
        return (thread is not None and thread.is_alive() and not self._stopping and not self._is_paused()
                and (self._remote is None or self._remote.alive()))

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    # -- rows -----------------------------------------------------------------------------

    def cancel(self, row: Row) -> None:
        """Stop ``row`` (its caller went away): no-op when it has finished."""
        row.cancelled = True
        if self._remote is not None:
            self._remote.cancel(row)

    def row_grammar(self, request: GenerateRequest) -> Any:
        """The request's grammar matcher (compiled once per spec; compiling takes up to seconds: call it off an
        event loop). With ``process`` the engine process compiles it: a row carries the request's spec instead."""
        assert request.grammar is not None
        with self._start_lock:
            if self.batch is None:
                raise BackendUnavailable("the local backend is not running", retry_after=5.0)
            if self._grammars is None:
                self._grammars = GrammarCache(self.tokenizer, self.vocab_size, self.batch.eos_ids)
        try:
            return self._grammars.row(request.grammar, request.sampling.stop_token_ids)
        except ValueError as exc:
            raise BackendError(str(exc), status_code=400) from exc

    def enqueue(self, *rows: Row) -> Row:
        """Queue validated rows for the worker, all at once (BackendUnavailable: not running, or the queue
        is full); returns the first."""
        with self._cv:
            if self._thread is None or self._stopping:
                raise BackendUnavailable("the local backend is not running", retry_after=5.0)
            if len(self._queue) + len(rows) > self.options.max_queue:
                raise BackendUnavailable("the local backend queue is full", retry_after=1.0)
            now = time.perf_counter()
            for row in rows:
                row.queued_at = now
            self._queue.extend(rows)
            self._cv.notify_all()
        return rows[0]

    # -- pause, resume, weights -----------------------------------------------------------

    def pause(self) -> None:
        """Stop admitting rows (the running ones go on: :meth:`idle` says when they have finished)."""
        with self._cv:
            self._paused = True

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    def idle(self) -> bool:
        """Nothing queued for the worker (unless paused) and nothing running."""
        return self._idle.is_set()

    def update_weights(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Load ``tensors`` (here or in the engine process) as the next policy version, which it returns; call it
        when :meth:`idle`, inside :meth:`holding_new_rows`."""
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
            if self.batch is not None:
                self.batch.forget_prefixes()  # their keys and values came from the old weights
                self.batch.policy_version = version
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the tensors may be the trainer's (CUDA IPC): copied now

    def release_cache(self) -> int:
        """Free the KV cache of a CPU engine in this process while no row runs; returns the bytes freed (0 while rows
        run, before :meth:`start`, for an engine process, whose memory is its own, and on a GPU, where a new cache
        would also mean capturing the CUDA graphs again). A trainer calls it before an update: the new weights forget
        every cached prefix anyway, and meanwhile the cache would sit idle beside the update's peak (the next rows
        grow a new one)."""
        if self._remote is not None or self.batch is None or self.device.type != "cpu":
            return 0
        with self._model_lock:
            freed = self.batch.release_cache()
        if freed:
            log.info("local engine: KV cache released (%.2f GB)", freed / 1e9)
        return freed

    def load_weights_when_idle(self, tensors: Mapping[str, torch.Tensor], version: int) -> None:
        """:meth:`load_weights` once the rows running now have finished, holding new ones back meanwhile (the
        engine process: its clients' rows are not paused by the owner)."""
        with self.holding_new_rows():
            self._idle.wait()
            self.load_weights(tensors, version)

    @contextlib.contextmanager
    def holding_new_rows(self) -> Iterator[None]:
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

    # -- the worker -----------------------------------------------------------------------

    def _run(self) -> None:
        batch = self.batch
        assert batch is not None
        self._threads.start()
        self._warm_up()
        self._choose_threads()
        pooled = True  # this thread's OpenMP workers are alive (they start with its first parallel op)
        while True:
            waited = False
            with self._cv:
                while not self._stopping and not batch.rows and (self._is_paused() or not self._queue):
                    if pooled:  # idle: our workers would slow every other thread's parallel work (core/openmp.py)
                        pooled = not self._threads.release_pool()
                    self._idle.set()
                    self._cv.wait()
                    waited = True
                if self._stopping:
                    break
                if not batch.rows and not self._is_paused():
                    self._await_burst()
                admitted: list[Row] = []
                if not self._is_paused() and self._admit_now(batch):
                    while self._queue and len(batch.rows) + len(admitted) < self.options.max_batch_size:
                        row = self._queue.popleft()
                        if not row.cancelled:
                            admitted.append(row)
                if admitted or batch.rows:
                    self._idle.clear()
                    pooled = True
            if waited:
                self._threads.resume()
            if admitted or batch.rows:
                self._threads.adjust()
            started = time.perf_counter()
            try:
                with self._model_lock, torch.inference_mode():
                    if admitted:
                        batch.prefill(admitted)
                    if batch.rows:
                        batch.decode()
            except Exception:  # the batch fails its own rows; this only keeps the worker alive
                log.exception("local engine: unexpected error in the worker loop")
                batch.reset()
            elapsed = time.perf_counter() - started
            self.stats.busy_s += elapsed
            if admitted:
                self._admission.record(elapsed)
        self._shutdown(batch)

    def _await_burst(self) -> None:
        """Holding ``_cv``, with nothing running: wait while more rows keep arriving (``admission.py``)."""
        deadline = time.perf_counter() + BURST_MAX_S
        size = len(self._queue)
        while not self._stopping and time.perf_counter() < deadline:
            self._cv.wait(BURST_QUIET_S)
            if len(self._queue) == size:
                return
            size = len(self._queue)

    def _admit_now(self, batch: BatchEngine) -> bool:
        """Whether to prefill the queued rows before the next decode step (admission.py)."""
        return self._admission.admit_now(self._queue, len(batch.rows), self.options.max_batch_size)

    def _warm_up(self) -> None:
        """One small forward on this thread: its first use of the CPU thread pool is slow."""
        try:
            with self._model_lock, torch.inference_mode():
                self.model(
                    input_ids=torch.tensor([[pad_token_id(self.tokenizer)] * 2], device=self.device), logits_to_keep=1
                )
        except Exception:
            log.exception("local engine: warm-up forward failed")

    def _choose_threads(self) -> None:
        """Time a decode-sized forward (one token in each of up to 16 rows, no cache) on each thread count the free
        cores allow and keep the fastest (``thread_tuner.py``; CPU only, before the first row is served)."""
        rows = max(1, min(CALIBRATION_ROWS, self.options.max_batch_size))
        ids = torch.full((rows, 1), pad_token_id(self.tokenizer), device=self.device)
        try:
            with self._model_lock, torch.inference_mode():
                self._threads.calibrate(lambda: self.model(input_ids=ids, logits_to_keep=1),
                                        key=(str(self.model_path), str(self.dtype), rows, self.options.packed_weights))
        except Exception:
            log.exception("local engine: timing the CPU thread counts failed")

    def _shutdown(self, batch: BatchEngine) -> None:
        with self._model_lock:
            batch.abort_all()
        with self._cv:
            queued, self._queue = list(self._queue), collections.deque()
            self._idle.set()
        for row in queued:
            row.sink.error(BackendUnavailable("the local backend was closed", retry_after=5.0))
