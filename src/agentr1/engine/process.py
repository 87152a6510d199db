"""The engine in a process of its own (``Engine(process=True)``; the gateway's ``LocalBackend(engine_process=True)``).

Why: the engine's worker thread releases the GIL around every torch op (a decode step is dozens of
them, a prefill hundreds) and must take it back each time. In the process of a training job the
gateway's event loop and the agents' threads hold the GIL most of the time while a rollout runs,
and each take-back waits up to the interpreter's switch interval (5 ms): the engine then runs at a
fraction of its own speed. In a child process the engine has a GIL of its own.

The child builds an ordinary (threaded) :class:`~.engine.Engine` from the same options (the parent hands it the class
to build, ``make_engine``: the child imports no engine module, so the engine starting its own process is no import
cycle); its main
thread reads requests from a pipe and queues them as rows whose sink sends the tokens back. The
parent's :class:`EngineProcess` keeps the rows in flight and hands what comes back to their sinks
from a reader thread. Weights go over the same pipe as tensors (CUDA tensors as IPC handles, CPU
tensors through shared memory) and are copied in place by the child exactly as in a thread
(:func:`~.weights.copy_into`); the parent keeps the policy version and tells the child, so every
result carries the version that sampled it. The child's counters come back with every result.
Spawned (not forked): a CUDA context cannot be forked.

Other processes may share the engine (``Engine(address=...)``: the trainer's gateway processes,
``agentr1.gateway.GatewayShards``): the child listens on a Unix socket (:attr:`EngineProcess.address`, with a
random key) and serves each connection as it serves the parent's pipe, rows and cancellations. Only the parent
loads weights; the child then holds new rows back until the running ones (everyone's) have finished, loads, and
tells every client the new policy version before it answers the parent, so a session a client opens after the
parent's update returned records the new version. The child itself is in ``child.py``.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import queue
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Client
from typing import Any

from agentr1.core.generation import BackendError, BackendUnavailable, GenerateRequest

from .options import EngineOptions
from .process_messages import error_of, pack
from .rows import EngineStats, Row

__all__ = ["EngineAddress", "EngineClient", "EngineProcess", "feed"]

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class EngineAddress:
    """Where an engine process listens for other processes: a Unix socket and the key it accepts."""

    path: str
    authkey: bytes


class EngineLink:
    """One connection to the engine process: rows sent, what comes back handed to their sinks (a reader thread).
    The parent's pipe (:class:`EngineProcess`) and a client's socket (:class:`EngineClient`) are both this."""

    reader_name = "agentr1-engine-reader"

    def __init__(self, conn: Any, stats: EngineStats, on_finished: Callable[[], None],
                 on_version: Callable[[int], None] | None = None) -> None:
        self.conn, self.stats, self.on_finished, self.on_version = conn, stats, on_finished, on_version
        self.rows: dict[int, Row] = {}
        self._ids = itertools.count()
        self._send_lock = threading.Lock()
        self._replies: dict[str, queue.Queue[tuple[Any, ...]]] = {"weights": queue.Queue(), "stats": queue.Queue()}
        self._reader = threading.Thread(target=self._read, name=self.reader_name, daemon=True)

    def alive(self) -> bool:
        return self._reader.is_alive()

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self.conn.send(message)

    def submit(self, rows: list[Row]) -> None:
        """Send ``rows`` to the child in one message: they reach its queue together, as they would
        reach the engine thread's (their ``grammar`` holds the request's GrammarSpec, compiled there)."""
        batch = []
        for row in rows:
            row.slot = next(self._ids)  # the parent's rows have no cache slot: the id names it in messages
            self.rows[row.slot] = row
            batch.append((row.slot, GenerateRequest(row.prompt_ids, row.sampling, request_id=row.request_id,
                                                    multimodal=row.multimodal, grammar=row.grammar,
                                                    prompt_logprobs=row.prompt_logprobs),
                          getattr(row.sink, "queue", None) is not None))
        try:
            self._send(("submit", batch))
        except (OSError, ValueError) as exc:
            for row in rows:
                self.rows.pop(row.slot, None)
                row.sink.error(BackendUnavailable(f"the engine process is gone: {exc}", retry_after=5.0))
            self.on_finished()

    def cancel(self, row: Row) -> None:
        if self.rows.pop(row.slot, None) is row:
            try:
                self._send(("cancel", row.slot))
            except (OSError, ValueError):
                pass
            self.on_finished()

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "delta":
                row = self.rows.get(message[1])
                if row is not None:
                    row.sink.delta(message[2], message[3], message[4])
            elif kind == "prompt":
                row = self.rows.get(message[1])
                if row is not None:
                    row.sink.prompt(message[2], message[3])
            elif kind in ("result", "error"):
                self.stats.__dict__.update(message[-1])
                row = self.rows.pop(message[1], None)
                if row is None:
                    continue
                if kind == "result":
                    row.sink.result(message[2], message[3], message[4])
                else:
                    row.sink.error(error_of(*message[2:6]))
                self.on_finished()
            elif kind == "version":  # a client: the engine's weights changed (or, first, the version it serves)
                if self.on_version is not None:
                    self.on_version(message[1])
                try:
                    self._send(("version_seen", message[1]))
                except (OSError, ValueError):
                    break
            elif kind in self._replies:
                self._replies[kind].put(message[1:])
            elif kind == "closed":
                break
        gone = BackendUnavailable("the engine process has stopped", retry_after=5.0)
        for rid in list(self.rows):
            row = self.rows.pop(rid, None)
            if row is not None:
                row.sink.error(gone)
        self._replies["weights"].put(("failed", "unavailable", "the engine process has stopped", 503, 5.0))
        self._replies["stats"].put(({},))
        self.on_finished()


class EngineProcess(EngineLink):
    """The parent's side: start the child, send it rows and weights, deliver what it answers."""

    def __init__(self, make_engine: Callable[..., Any], model_path: str, options: EngineOptions, policy_version: int,
                 stats: EngineStats, on_finished: Callable[[], None]) -> None:
        context = multiprocessing.get_context("spawn")
        import torch.multiprocessing  # noqa: F401  (tensors pickle as shared memory / CUDA IPC handles)

        from .child import serve

        conn, child = context.Pipe(duplex=True)
        authkey = secrets.token_bytes(32)
        self.process = context.Process(target=serve, daemon=True, name="agentr1-engine",
                                       args=(child, make_engine, model_path, options, policy_version, authkey))
        self.process.start()
        child.close()
        super().__init__(conn, stats, on_finished)
        if not self.conn.poll(START_TIMEOUT_S):
            self.process.kill()
            raise BackendError(f"the engine process did not start within {START_TIMEOUT_S:.0f} s")
        first = self.conn.recv()
        if first[0] != "ready":
            self.process.join(timeout=10)
            raise BackendError(f"the engine process failed to start: {first[1]}")
        self.address = EngineAddress(first[1], authkey)  # where engines of other processes connect
        self._reader.start()

    def alive(self) -> bool:
        return self.process.is_alive() and super().alive()

    def update_weights(self, tensors: Mapping[str, Any], version: int) -> None:
        """Copy ``tensors`` into the child's model (it waits for the rows running there, its clients' too);
        raises what the child raised."""
        if not self.alive():
            raise BackendUnavailable("the engine process has stopped", retry_after=5.0)
        self._send(("weights", pack(tensors), version))
        reply = self._replies["weights"].get()
        if reply[0] != "ok":
            raise ValueError(reply[1]) if reply[0] == "invalid" else error_of(*reply[1:])

    def refresh_stats(self) -> None:
        """The child's counters now (rows its clients ran included) into ``stats``; as they were if it has stopped."""
        if not self.alive():
            return
        try:
            self._send(("stats",))
        except (OSError, ValueError):
            return
        (counters,) = self._replies["stats"].get()
        self.stats.__dict__.update(counters)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the child: its running rows end with ``finish_reason="abort"``."""
        try:
            self._send(("stop",))
        except (OSError, ValueError):
            pass
        self._reader.join(timeout)
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
        self.conn.close()


class EngineClient(EngineLink):
    """Another process's side: rows through the socket of an engine process that :class:`EngineProcess` started
    (``address``); ``on_version`` learns the policy version it serves, at once and at every weight load."""

    reader_name = "agentr1-engine-client"

    def __init__(self, address: EngineAddress, stats: EngineStats, on_finished: Callable[[], None],
                 on_version: Callable[[int], None]) -> None:
        try:
            conn = Client(address.path, family="AF_UNIX", authkey=address.authkey)
        except (OSError, EOFError, multiprocessing.AuthenticationError) as exc:
            raise BackendUnavailable(f"no engine process at {address.path}: {exc}", retry_after=5.0) from exc
        super().__init__(conn, stats, on_finished, on_version)
        self._reader.start()

    def update_weights(self, tensors: Mapping[str, Any], version: int) -> None:
        raise BackendError("this backend shares another process's engine: weights are loaded by the process that "
                           "started it", status_code=409)

    def refresh_stats(self) -> None:
        """(The counters come back with every result.)"""

    def close(self, timeout: float = 60.0) -> None:
        """Leave the engine: the child stops this connection's running rows (they end with an error here) and
        says goodbye."""
        try:
            self._send(("bye",))
        except (OSError, ValueError):
            pass
        self._reader.join(timeout)
        self.conn.close()


def feed(engine: Any, remote: EngineLink) -> None:
    """The parent's worker (instead of the engine loop): send queued rows to the child unless paused;
    ``engine._idle`` is set while nothing is queued for sending or in flight in the child."""
    cv = engine._cv
    while True:
        with cv:
            while not engine._stopping and (engine._is_paused() or not engine._queue):
                if not remote.rows:
                    engine._idle.set()
                cv.wait()
            if engine._stopping:
                break
            rows = [row for row in engine._queue if not row.cancelled]
            engine._queue.clear()
            engine._idle.clear()
        if rows:
            remote.submit(rows)
    remote.close()
    with cv:
        queued = list(engine._queue)
        engine._queue.clear()
        engine._idle.set()
    for row in queued:
        row.sink.error(BackendUnavailable("the local backend was closed", retry_after=5.0))
