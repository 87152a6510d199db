"""The one call path: a call of any kind holds its session in the gateway's cache until it ends, streamed calls
included, so a session is never loaded twice (two states would hand out the same step index twice)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import contextmanager

import httpx
import pytest

from agentr1.core.generation import StreamDelta
from agentr1.core.rendering import load_renderer
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore


@pytest.fixture(scope="module")
def renderer(smollm2_path):
    return load_renderer(smollm2_path)


class GatedBackend(InstantBackend):
    """Streams one token, then waits until the test opens the gate."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, "a streamed answer", model_name="policy")
        self.gate = threading.Event()
        self.streaming = threading.Event()

    async def stream(self, request):
        result = await self.generate(request)
        yield StreamDelta(result.output_ids[:1], result.logprobs[:1])
        self.streaming.set()
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        yield StreamDelta(result.output_ids[1:], result.logprobs[1:])
        yield StreamDelta([], [], result)


def _stream_in_thread(url: str, out: list) -> threading.Thread:
    def run() -> None:
        with httpx.stream("POST", url, json={"model": "policy", "stream": True,
                                             "messages": [{"role": "user", "content": "hi"}]}, timeout=30) as r:
            out.extend(line for line in r.iter_lines() if line.startswith("data: "))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("streamed_second", [False, True])
def test_a_streaming_call_in_flight_keeps_its_session_from_eviction(tmp_path, renderer, streamed_second):
    backend = GatedBackend(renderer.tokenizer)
    with serve(tmp_path / "gw.db", backend, renderer) as (url, store, app_gateway):
        app_gateway.sessions.max_cached = 1  # any new session would push the oldest idle one out
        a = httpx.post(f"{url}/sessions", json={}).json()
        lines: list[str] = []
        thread = _stream_in_thread(f"{a['base_url']}/chat/completions", lines)
        assert backend.streaming.wait(10)
        for _ in range(3):  # other sessions come and go while the stream of `a` is open
            httpx.post(f"{url}/sessions", json={}).raise_for_status()
        assert a["id"] in app_gateway.sessions._states  # still the same in-memory session
        # a second call of `a` while the first streams: it must get the next index, not index 0 again
        body = {"model": "policy", "messages": [{"role": "user", "content": "another question"}]}
        if streamed_second:
            backend.gate.set()
        second = httpx.post(f"{a['base_url']}/chat/completions", json=body, timeout=30)
        assert second.status_code == 200, second.text
        backend.gate.set()
        thread.join(30)
        final = [json.loads(line[6:]) for line in lines if line != "data: [DONE]"]
        assert not any("error" in chunk for chunk in final), final
        steps = store.get_session(a["id"]).steps
        assert sorted(s.index for s in steps) == [0, 1]
        # released when the stream ended (the client may read its last bytes a moment before the server ends it)
        deadline = time.monotonic() + 5
        while app_gateway.sessions._states[a["id"]].in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert app_gateway.sessions._states[a["id"]].in_flight == 0


def test_a_finished_stream_releases_its_session(tmp_path, renderer):
    backend = GatedBackend(renderer.tokenizer)
    backend.gate.set()
    with serve(tmp_path / "gw.db", backend, renderer) as (url, _store, gw):
        gw.sessions.max_cached = 1
        a = httpx.post(f"{url}/sessions", json={}).json()
        lines: list[str] = []
        _stream_in_thread(f"{a['base_url']}/chat/completions", lines).join(30)
        assert lines[-1] == "data: [DONE]"
        deadline = time.monotonic() + 5
        while gw.sessions._states[a["id"]].in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        httpx.post(f"{url}/sessions", json={}).raise_for_status()
        assert a["id"] not in gw.sessions._states  # idle again: evicted like any other


@contextmanager
def serve(db, backend, renderer):
    """A real gateway (uvicorn) and, since it runs in this process, its gateway object."""
    store = TraceStore.open(str(db))
    app = create_app(GatewaySettings(db=str(db)), store=store, backend=backend, renderer=renderer)
    try:
        with BackgroundServer(app) as url:
            yield url, store, app.state.gateway
    finally:
        store.close()
