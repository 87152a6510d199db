"""The engine process itself (``process.py`` starts it): a threaded :class:`~.engine.Engine`, built here from the
parent's :class:`~.options.EngineOptions`, fed by the parent's pipe and by the clients that connect to its socket.
The parent hands over the class to build (``make_engine``), so this module imports no engine module: the engine
starts its own process without an import cycle. What it needs of the engine is :class:`ServedEngine`.

Each connection is a :class:`_Peer`: the rows it sent (by the ids it gave them) and the lock its answers go out
under. The parent's pipe is read on the main thread, which also loads weights and stops the process; each client
gets a thread of its own. A client that leaves (or dies) has its running rows cancelled.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping
from multiprocessing import AuthenticationError
from multiprocessing.connection import Listener
from typing import Any, Protocol

from agentr1.core import freeze_heap
from agentr1.core.generation import GenerateRequest, GenerateResult

from .options import EngineOptions
from .process_messages import error_fields, unpack
from .rows import EngineStats, Row

__all__ = ["ServedEngine", "serve"]

log = logging.getLogger(__name__)

VERSION_SEEN_TIMEOUT_S = 30.0  # how long a weight load waits for each client to take the new version in


class ServedEngine(Protocol):
    """What the engine process needs of the threaded engine it serves (:class:`~.engine.Engine`)."""

    stats: EngineStats

    @property
    def policy_version(self) -> int: ...

    def start(self) -> None: ...

    def close(self) -> None: ...

    def row_grammar(self, request: GenerateRequest) -> Any: ...

    def enqueue(self, *rows: Row) -> Row: ...

    def cancel(self, row: Row) -> None: ...

    def load_weights_when_idle(self, tensors: Mapping[str, Any], version: int) -> None: ...


class _Sink:
    """A row's sink in the child: its tokens go back over the connection that sent it."""

    def __init__(self, peer: _Peer, rid: int, streaming: bool) -> None:
        self.peer, self.rid, self.streaming = peer, rid, streaming

    def delta(self, token_ids: list[int], logprobs: list[float], tops: list[Any] | None = None) -> None:
        if self.streaming:
            self.peer.send(("delta", self.rid, list(token_ids), list(logprobs), tops))

    def prompt(self, logprobs: list[float | None], tops: list[Any]) -> None:
        if self.streaming:
            self.peer.send(("prompt", self.rid, list(logprobs), list(tops)))

    def result(self, result: GenerateResult, token_ids: list[int], logprobs: list[float]) -> None:
        self.peer.rows.pop(self.rid, None)
        self.peer.send(("result", self.rid, result, list(token_ids), list(logprobs), self.peer.counters()))

    def error(self, exc: BaseException) -> None:
        self.peer.rows.pop(self.rid, None)
        self.peer.send(("error", self.rid, *error_fields(exc), self.peer.counters()))


class _Peer:
    """One connection (the parent's pipe or a client's socket): its rows, and its answers sent one at a time."""

    def __init__(self, conn: Any, engine: ServedEngine) -> None:
        self.conn, self.engine = conn, engine
        self.rows: dict[int, Row] = {}
        self._lock = threading.Lock()
        self.version_seen = threading.Event()

    def counters(self) -> dict[str, Any]:
        stats: EngineStats = self.engine.stats
        return dict(stats.__dict__)

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            try:
                self.conn.send(message)
            except (OSError, ValueError):  # the other side is gone
                pass

    def submit(self, batch: list[tuple[int, GenerateRequest, bool]]) -> None:
        admitted = []
        for rid, request, streaming in batch:
            sink = _Sink(self, rid, streaming)
            try:
                grammar = self.engine.row_grammar(request) if request.grammar is not None else None
            except Exception as exc:
                sink.error(exc)
                continue
            self.rows[rid] = Row(list(request.prompt_ids), request.sampling, sink, request_id=request.request_id,
                                 multimodal=request.multimodal, grammar=grammar,
                                 prompt_logprobs=request.prompt_logprobs)
            admitted.append(self.rows[rid])
        try:
            if admitted:
                self.engine.enqueue(*admitted)
        except Exception as exc:
            for row in admitted:
                row.sink.error(exc)

    def cancel(self, rid: int) -> None:
        row = self.rows.pop(rid, None)
        if row is not None:
            row.cancelled = True

    def handle(self, message: tuple[Any, ...]) -> bool:
        """A message every connection may send; False if it is not one of those."""
        if message[0] == "submit":
            self.submit(message[1])
        elif message[0] == "cancel":
            self.cancel(message[1])
        else:
            return False
        return True


class _Clients:
    """The connections of other processes: accepted on a thread, each served on one of its own."""

    def __init__(self, engine: ServedEngine, authkey: bytes) -> None:
        self.engine = engine
        self.folder = tempfile.mkdtemp(prefix="agentr1-engine-")
        self.listener = Listener(os.path.join(self.folder, "socket"), family="AF_UNIX", authkey=authkey)
        self.peers: list[_Peer] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="agentr1-engine-accept", daemon=True).start()

    @property
    def address(self) -> str:
        return str(self.listener.address)

    def _accept(self) -> None:
        while True:
            try:
                conn = self.listener.accept()
            except (OSError, EOFError, AuthenticationError):  # closed, or a connection with the wrong key
                if self._closed:
                    return
                continue
            peer = _Peer(conn, self.engine)
            with self._lock:
                self.peers.append(peer)
                peer.send(("version", self.engine.policy_version))  # (under the lock: before any newer one)
            threading.Thread(target=self._serve, args=(peer,), name="agentr1-engine-client", daemon=True).start()

    def _serve(self, peer: _Peer) -> None:
        while True:
            try:
                message = peer.conn.recv()
            except (EOFError, OSError):
                break
            if peer.handle(message):
                continue
            if message[0] == "version_seen":
                peer.version_seen.set()
            elif message[0] == "bye":
                break
        with self._lock:
            self.peers.remove(peer)
        for rid in list(peer.rows):
            peer.cancel(rid)
        peer.send(("closed",))
        peer.conn.close()

    def announce(self, version: int) -> None:
        """Tell every client the policy version the engine serves now; return once each has taken it in."""
        with self._lock:
            peers = list(self.peers)
            for peer in peers:
                peer.version_seen.clear()
                peer.send(("version", version))
        for peer in peers:
            if not peer.version_seen.wait(VERSION_SEEN_TIMEOUT_S):
                log.warning("an engine client did not take policy version %d in within %.0f s", version,
                            VERSION_SEEN_TIMEOUT_S)

    def close(self) -> None:
        self._closed = True
        self.listener.close()  # (removes the socket file)
        shutil.rmtree(self.folder, ignore_errors=True)
        with self._lock:
            peers = list(self.peers)
        for peer in peers:
            peer.send(("closed",))


def serve(conn: Any, make_engine: Callable[..., ServedEngine], model_path: str, options: EngineOptions,
          policy_version: int, authkey: bytes) -> None:
    """The child's main: a threaded engine (``make_engine``: the :class:`~.engine.Engine` class) on ``options`` fed
    from ``conn`` and its clients until "stop" or the parent is gone."""
    try:
        engine = make_engine(model_path, options, policy_version=policy_version)
        engine.start()
        clients = _Clients(engine, authkey)
    except Exception:
        conn.send(("failed", traceback.format_exc(limit=5)))
        return
    freeze_heap()  # the model and the imports: no full collection walks them between decode steps
    parent = _Peer(conn, engine)
    parent.send(("ready", clients.address))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        kind = message[0]
        if parent.handle(message):
            continue
        if kind == "weights":
            _, packed, version = message
            try:
                engine.load_weights_when_idle(unpack(packed), version)
            except ValueError as exc:
                parent.send(("weights", "invalid", str(exc)))
            except Exception as exc:
                parent.send(("weights", "failed", *error_fields(exc)))
            else:
                clients.announce(version)
                parent.send(("weights", "ok"))
            del packed, message
        elif kind == "stats":
            parent.send(("stats", parent.counters()))
        elif kind == "stop":
            break
    clients.close()
    engine.close()
    parent.send(("closed",))
    conn.close()
