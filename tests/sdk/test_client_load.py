"""The SDK's gateway calls under load, and what a failed call says.

Seen on the H200: 128 concurrent ``agentr1.envs:run_task`` sessions in one trainer process lost up to
62 sessions a step to ``GatewayUnreachable: cannot reach the agentr1 gateway at ... ()`` while the
gateway was up. The cause: the SDK built a new ``httpx.AsyncClient`` for every session call, and
each one loads the CA bundle into a fresh TLS context (10-130 ms of blocking CPU, measured 83 ms on
the 2-core test machine). 128 sessions doing that at once blocked their shared event loop for
seconds at a time (profile: 48 s of a 117 s run in ``load_verify_locations``; loop lag up to 16 s),
so connects and reads timed out in the client although the gateway had answered: a
``ConnectTimeout`` whose text is empty, reported as "unreachable" with "()".
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
import uuid

import pytest

import agentr1.sdk as sdk
from agentr1.sdk import GatewayUnreachable, areward, configure, failure_kind, is_infrastructure_error, session
from agentr1.sdk.client import arequest, request

GatewayTimeout = getattr(sdk, "GatewayTimeout", None)  # looked up by name: the load test runs on older SDKs too
GatewayConnectionLost = getattr(sdk, "GatewayConnectionLost", None)

SESSIONS = 256


async def _sessions(n: int, group: str) -> tuple[list[BaseException], float]:
    """``n`` concurrent sessions (create, reward, finish) on this loop: their errors and the loop's worst lag."""
    lags: list[float] = []

    async def monitor() -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.02)
            lags.append(time.monotonic() - started - 0.02)

    async def one(i: int) -> None:
        async with session(task_id=f"load-{i}", group_id=group):
            await areward(1.0, name="load")

    watcher = asyncio.create_task(monitor())
    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    watcher.cancel()
    return [r for r in results if isinstance(r, BaseException)], max(lags, default=0.0)


@pytest.mark.slow
def test_256_concurrent_sessions_share_one_tls_context_and_none_times_out(gateway, monkeypatch):
    _, store = gateway
    monkeypatch.setenv("AGENTR1_TIMEOUT_S", "5")
    built = []
    load = ssl.SSLContext.load_verify_locations  # what makes a client expensive: loading the CA bundle

    def counting(self, *args, **kwargs):  # counts, and loads for real
        built.append(1)
        return load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    started = time.monotonic()
    group = f"load-{uuid.uuid4().hex}"
    errors, worst_lag = asyncio.run(_sessions(SESSIONS, group))
    seconds = time.monotonic() - started
    print(f"{SESSIONS} sessions in {seconds:.1f} s; TLS contexts built: {len(built)}; worst loop lag {worst_lag:.2f} s")
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors[:3]]
    assert len(built) <= 1, f"{len(built)} TLS contexts for {SESSIONS * 3} calls: a client per call blocks the loop"
    stored = store.list_sessions(group_id=group, limit=10 * SESSIONS)
    assert len(stored) == SESSIONS and all(s.status == "finished" for s in stored)


@pytest.fixture
def silent_server():
    """A real TCP server that accepts connections and never answers (an overloaded gateway)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def hanging_up_server():
    """A real TCP server that reads the request and closes the connection without an answer."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except OSError:
                continue
            conn.recv(65536)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def sdk_at(gateway, monkeypatch):
    """Point the SDK at another URL for one test (the module's gateway afterwards)."""
    url, _ = gateway
    monkeypatch.setenv("AGENTR1_TIMEOUT_S", "0.5")
    yield configure
    configure(url)


def test_a_gateway_that_does_not_answer_is_a_timeout_naming_the_exception(silent_server, sdk_at):
    sdk_at(silent_server)
    with pytest.raises(GatewayTimeout) as caught:
        asyncio.run(arequest("POST", "/sessions", json={}))
    text = str(caught.value)
    cause = type(caught.value.__cause__).__name__  # ReadTimeout (ConnectTimeout if this loop lags 0.5 s)
    assert cause in ("ReadTimeout", "ConnectTimeout") and cause in text and "POST" in text and "/sessions" in text and "0.5 s" in text
    assert "()" not in text and "unreachable" not in text.lower()
    assert isinstance(caught.value, TimeoutError) and not isinstance(caught.value, GatewayUnreachable)
    assert failure_kind(caught.value) == "timeout" and is_infrastructure_error(caught.value)
    with pytest.raises(GatewayTimeout, match="Timeout"):  # the blocking client says the same
        request("POST", "/sessions", json={})


def test_a_session_whose_gateway_hangs_is_an_infrastructure_failure(silent_server, sdk_at):
    sdk_at(silent_server)

    async def agent() -> None:
        async with session(task_id="hang"):
            pass

    with pytest.raises(GatewayTimeout) as caught:
        asyncio.run(agent())
    assert failure_kind(caught.value) == "timeout"


def test_no_gateway_is_unreachable_naming_the_connect_error(sdk_at):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sdk_at(f"http://127.0.0.1:{port}")
    with pytest.raises(GatewayUnreachable) as caught:
        asyncio.run(arequest("GET", "/ready"))
    assert "ConnectError" in str(caught.value) and "()" not in str(caught.value)
    assert failure_kind(caught.value) == "backend"


def test_a_connection_closed_without_an_answer_is_a_lost_connection(hanging_up_server, sdk_at):
    sdk_at(hanging_up_server)
    with pytest.raises(GatewayConnectionLost) as caught:
        asyncio.run(arequest("POST", "/sessions", json={}))
    cause = type(caught.value.__cause__).__name__  # RemoteProtocolError, or ReadError on a reset
    assert cause in ("RemoteProtocolError", "ReadError") and cause in str(caught.value)
    assert "()" not in str(caught.value)
    assert failure_kind(caught.value) == "backend" and is_infrastructure_error(caught.value)


class DropFirstFinish:
    """A real TCP proxy in front of the gateway that closes the connection of the first ``/finish``
    request without forwarding it (a connection lost on the way), and relays everything else."""

    def __init__(self, upstream: str) -> None:
        self.upstream = int(upstream.rsplit(":", 1)[1])
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.dropped = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn = self.server.accept()[0]
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        first = conn.recv(65536)
        if b"/finish" in first.split(b"\r\n", 1)[0] and not self.dropped:
            self.dropped += 1
            conn.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        upstream.sendall(first)
        threading.Thread(target=self._pipe, args=(conn, upstream), daemon=True).start()
        self._pipe(upstream, conn)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                s.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.server.close()


def test_finishing_is_retried_once_when_the_connection_is_lost(gateway, sdk_at, monkeypatch):
    url, store = gateway
    monkeypatch.setenv("AGENTR1_TIMEOUT_S", "30")
    proxy = DropFirstFinish(url)
    sdk_at(proxy.url)

    async def agent() -> str:
        async with session(task_id="finish-retry") as active:
            return active.id

    try:
        session_id = asyncio.run(agent())
    finally:
        proxy.close()
    assert proxy.dropped == 1
    assert store.get_session(session_id, steps=False).status == "finished"
