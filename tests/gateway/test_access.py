"""Access control (docs/reliability.md): session keys, the admin key, the gateway key, per-key limits."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import httpx
import pytest
from gateway_harness import serve

from agentr1.core.rendering import load_renderer
from agentr1.gateway import AuthSettings
from agentr1.gateway.backends.instant import InstantBackend

BODY = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
ADMIN = "admin-secret-key"
GATEWAY_KEY = "gateway-wide-key"


@pytest.fixture(scope="module")
def renderer(smollm2_path):
    return load_renderer(smollm2_path)


def _backend(renderer, reply="ok"):
    return InstantBackend(renderer.tokenizer, reply, model_name="policy", max_context=2048)


def _bearer(key):
    return {"Authorization": f"Bearer {key}"}


def _session(url, headers=None):
    r = httpx.post(f"{url}/sessions", json={}, headers=headers or {})
    assert r.status_code == 201, r.text
    return r.json()


def _is_openai_error(r, status, code=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code is not None:
        assert err["code"] == code


@pytest.fixture()
def locked(tmp_path, renderer):
    with serve(tmp_path / "gw.db", backend=_backend(renderer), renderer=renderer, auth=AuthSettings(admin_key=ADMIN)) as (url, store):
        yield url, store


def test_calls_naming_a_session_need_its_key_or_the_admin_key(locked):
    url, store = locked
    a, b = _session(url), _session(url)
    chat = f"{url}/v1/chat/completions"
    # no key, or an unrelated (e.g. OpenAI) key: 401; another session's key: 403
    for how in ({"X-Agentr1-Session": a["id"]}, {"baggage": f"agentr1.session={a['id']}"}):
        _is_openai_error(httpx.post(chat, json=BODY, headers=how), 401, "invalid_api_key")
        _is_openai_error(httpx.post(chat, json=BODY, headers={**how, **_bearer("sk-openai-something")}), 401)
        _is_openai_error(httpx.post(chat, json=BODY, headers={**how, **_bearer(b["api_key"])}), 403, "forbidden")
        _is_openai_error(httpx.post(chat, json=BODY, headers={**how, "X-Agentr1-Session-Key": b["api_key"]}), 403)
    _is_openai_error(httpx.post(f"{a['base_url']}/chat/completions", json=BODY), 401)
    _is_openai_error(httpx.post(f"{a['base_url']}/chat/completions", json=BODY, headers=_bearer(b["api_key"])), 403)
    _is_openai_error(httpx.post(f"{a['base_url']}/completions", json={"model": "policy", "prompt": "x"},
                                headers=_bearer(b["api_key"])), 403)
    assert store.get_session(a["id"]).steps == []
    # allowed: own key (Bearer, X-Api-Key, or X-Agentr1-Session-Key next to an unrelated bearer), admin key
    allowed = [_bearer(a["api_key"]), {"X-Api-Key": a["api_key"]},
               {"X-Agentr1-Session-Key": a["api_key"], **_bearer("sk-openai-something")}, _bearer(ADMIN)]
    for headers in allowed:
        r = httpx.post(chat, json=BODY, headers={"X-Agentr1-Session": a["id"], **headers})
        assert r.status_code == 200 and r.json()["agentr1"]["session_id"] == a["id"], r.text
    assert httpx.post(f"{a['base_url']}/chat/completions", json=BODY, headers=_bearer(a["api_key"])).status_code == 200
    assert len(store.get_session(a["id"]).steps) == len(allowed) + 1
    assert store.get_session(b["id"]).steps == []


def test_a_session_key_cannot_read_reward_or_finish_another_session(locked):
    url, store = locked
    a, b = _session(url), _session(url)
    httpx.post(f"{a['base_url']}/chat/completions", json=BODY, headers=_bearer(a["api_key"])).raise_for_status()
    as_b = _bearer(b["api_key"])
    _is_openai_error(httpx.get(f"{url}/sessions/{a['id']}", headers=as_b), 403, "forbidden")
    _is_openai_error(httpx.post(f"{url}/sessions/{a['id']}/rewards", json={"value": 1.0}, headers=as_b), 403)
    _is_openai_error(httpx.post(f"{url}/sessions/{a['id']}/rewards", json=[{"value": 1.0}], headers=as_b), 403)
    _is_openai_error(httpx.post(f"{url}/sessions/{a['id']}/finish", json={}, headers=as_b), 403)
    _is_openai_error(httpx.get(f"{url}/sessions/{a['id']}"), 401)  # no key at all
    _is_openai_error(httpx.post(f"{url}/sessions/{a['id']}/rewards", json={"value": 1.0}), 401)
    _is_openai_error(httpx.post(f"{url}/sessions/{a['id']}/finish", json={}), 401)
    trace = store.get_session(a["id"])
    assert trace.status == "running" and trace.reward is None and all(s.reward is None for s in trace.steps)
    # its own key, and the admin key, may
    as_a = _bearer(a["api_key"])
    assert httpx.post(f"{url}/sessions/{a['id']}/rewards", json={"value": 0.5}, headers=as_a).status_code == 201
    assert httpx.get(f"{url}/sessions/{a['id']}", headers=_bearer(ADMIN)).json()["id"] == a["id"]
    assert httpx.post(f"{url}/sessions/{a['id']}/finish", json={}, headers=as_a).status_code == 200


def test_without_an_admin_key_the_loopback_gateway_stays_open(tmp_path, renderer):
    with serve(tmp_path / "o.db", backend=_backend(renderer), renderer=renderer) as (url, _store):
        a, b = _session(url), _session(url)
        r = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers={"X-Agentr1-Session": a["id"]})
        assert r.status_code == 200
        assert httpx.get(f"{url}/sessions/{a['id']}", headers=_bearer(b["api_key"])).status_code == 200
        assert httpx.post(f"{url}/v1/chat/completions", json=BODY).status_code == 200  # unattributed
        _is_openai_error(httpx.post(f"{url}/admin/pause"), 403, "admin_disabled")


def test_gateway_api_key_guards_session_creation_and_unattributed_calls(tmp_path, renderer):
    with serve(tmp_path / "k.db", backend=_backend(renderer), renderer=renderer,
               auth=AuthSettings(admin_key=ADMIN, api_key=GATEWAY_KEY)) as (url, _):
        _is_openai_error(httpx.post(f"{url}/sessions", json={}), 401, "invalid_api_key")
        _is_openai_error(httpx.post(f"{url}/sessions", json={}, headers=_bearer("wrong")), 401)
        _is_openai_error(httpx.post(f"{url}/v1/chat/completions", json=BODY), 401)
        s = _session(url, _bearer(GATEWAY_KEY))
        _session(url, _bearer(ADMIN))
        assert httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=_bearer(GATEWAY_KEY)).status_code == 200
        # a session key attributes the call by itself; the gateway key is no session key
        r = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=_bearer(s["api_key"]))
        assert r.status_code == 200 and r.json()["agentr1"]["session_id"] == s["id"]
        _is_openai_error(httpx.post(f"{s['base_url']}/chat/completions", json=BODY, headers=_bearer(GATEWAY_KEY)), 401)


def test_keys_never_reach_the_log_or_the_store_in_clear(tmp_path, renderer, caplog):
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "log.db"
    with serve(db, backend=_backend(renderer), renderer=renderer,
               auth=AuthSettings(admin_key=ADMIN, api_key=GATEWAY_KEY)) as (url, store):
        s = _session(url, _bearer(GATEWAY_KEY))
        key = s["api_key"]
        httpx.post(f"{s['base_url']}/chat/completions", json=BODY, headers=_bearer(key)).raise_for_status()
        httpx.post(f"{url}/v1/chat/completions", json=BODY, headers={"X-Agentr1-Session": s["id"],
                                                                     "X-Agentr1-Session-Key": key}).raise_for_status()
        httpx.post(f"{url}/sessions/{s['id']}/rewards", json={"value": 1}, headers=_bearer(key)).raise_for_status()
        httpx.post(f"{url}/v1/chat/completions", json={"model": "policy"}, headers=_bearer(key))  # a 400, logged or not
        httpx.post(f"{url}/admin/pause", headers=_bearer(ADMIN)).raise_for_status()
        httpx.post(f"{url}/admin/resume", headers=_bearer(ADMIN)).raise_for_status()
        assert len(store.get_session(s["id"]).steps) == 2
    assert caplog.records, "expected the gateway to log something"
    for secret in (key, ADMIN, GATEWAY_KEY):
        assert secret not in caplog.text
        for path in tmp_path.iterdir():  # the database and its journal files
            assert secret.encode() not in path.read_bytes()


class _SlowBackend(InstantBackend):
    """Holds each generation until released, so requests stay in flight."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.waiting = 0

    async def generate(self, request):
        self.waiting += 1
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return await super().generate(request)


def test_concurrent_requests_per_key_are_capped_with_429(tmp_path, renderer):
    backend = _SlowBackend(renderer.tokenizer, "ok", model_name="policy", max_context=2048)
    with serve(tmp_path / "c.db", backend=backend, renderer=renderer,
               auth=AuthSettings(admin_key=ADMIN, max_concurrent_per_key=2)) as (url, _):
        a, b = _session(url), _session(url)
        results: list[int] = []

        def call(key):
            r = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=_bearer(key), timeout=30)
            results.append(r.status_code)

        threads = [threading.Thread(target=call, args=(a["api_key"],)) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while backend.waiting < 2 and time.monotonic() < deadline:  # both are in flight
            time.sleep(0.02)
        assert backend.waiting == 2
        over = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=_bearer(a["api_key"]))
        _is_openai_error(over, 429, "too_many_concurrent_requests")
        assert over.headers["Retry-After"] == "1"
        other = threading.Thread(target=call, args=(b["api_key"],))  # another key is not limited by a's calls
        other.start()
        backend.release.set()
        for t in [*threads, other]:
            t.join(timeout=30)
        assert sorted(results) == [200, 200, 200]
        assert httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=_bearer(a["api_key"])).status_code == 200
