"""Runs separated by key: a run key (``GatewaySettings.auth.run_keys``) creates sessions in its own run only
and acts on that run's sessions only. Each forbidden action is tried; the keys never reach the store."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agentr1.core.rendering import load_renderer
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import AuthSettings, GatewaySettings
from agentr1.store import TraceStore

KEYS = {"run-a": "key-of-run-a-0123456789", "run-b": "key-of-run-b-0123456789"}
ADMIN = "admin-key-0123456789"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_model_path):
    renderer = load_renderer(tiny_model_path)
    db = f"sqlite:///{tmp_path_factory.mktemp('runkeys') / 'gw.db'}"
    store = TraceStore.open(db)
    app = create_app(GatewaySettings(model="tiny", db=db, accept_any_model=True,
                                     auth=AuthSettings(admin_key=ADMIN, run_keys=KEYS)),
                     store=store, backend=InstantBackend(renderer.tokenizer, "ok"), renderer=renderer)
    with BackgroundServer(app) as url:
        yield url, db
    store.close()


def error_code(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    return r.json()["error"]["code"]


def test_a_run_key_works_in_its_own_run(gateway):
    url, _ = gateway
    s = httpx.post(f"{url}/sessions", json={"task_id": "t"}, headers=bearer(KEYS["run-a"])).json()
    assert s["run_id"] == "run-a"  # its run, without asking
    assert httpx.post(f"{url}/sessions/{s['id']}/v1/chat/completions", json=CHAT,
                      headers=bearer(KEYS["run-a"])).status_code == 200
    assert httpx.post(f"{url}/sessions/{s['id']}/rewards", json={"value": 1.0},
                      headers=bearer(KEYS["run-a"])).status_code == 201
    assert httpx.get(f"{url}/sessions/{s['id']}", headers=bearer(KEYS["run-a"])).json()["run_id"] == "run-a"
    assert httpx.post(f"{url}/sessions/{s['id']}/finish", json={}, headers=bearer(KEYS["run-a"])).status_code == 200


def test_a_run_key_cannot_reach_another_run(gateway):
    url, _ = gateway
    a, b = KEYS["run-a"], KEYS["run-b"]
    theirs = httpx.post(f"{url}/sessions", json={}, headers=bearer(b)).json()
    assert error_code(httpx.post(f"{url}/sessions", json={"run_id": "run-b"}, headers=bearer(a)), 403) == "forbidden"
    for r in (
        httpx.post(f"{url}/sessions/{theirs['id']}/v1/chat/completions", json=CHAT, headers=bearer(a)),
        httpx.get(f"{url}/sessions/{theirs['id']}", headers=bearer(a)),
        httpx.post(f"{url}/sessions/{theirs['id']}/rewards", json={"value": 1.0}, headers=bearer(a)),
        httpx.post(f"{url}/sessions/{theirs['id']}/finish", json={}, headers=bearer(a)),
        httpx.get(f"{url}/sessions/no-such-session", headers=bearer(a)),  # unknown: the same 403
    ):
        assert error_code(r, 403) == "forbidden"
    assert error_code(httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=bearer(a)), 400) == "session_required"
    assert error_code(httpx.post(f"{url}/admin/pause", headers=bearer(a)), 401) == "invalid_api_key"
    # a session key of run B's session cannot reach run A's sessions either, and the admin key reaches both
    mine = httpx.post(f"{url}/sessions", json={}, headers=bearer(a)).json()
    assert error_code(httpx.get(f"{url}/sessions/{mine['id']}", headers=bearer(theirs["api_key"])), 403) == "forbidden"
    assert httpx.get(f"{url}/sessions/{theirs['id']}", headers=bearer(ADMIN)).status_code == 200
    assert httpx.get(f"{url}/sessions/{theirs['id']}", headers=bearer(theirs["api_key"])).status_code == 200


def test_run_keys_never_reach_the_store(gateway):
    url, db = gateway
    httpx.post(f"{url}/sessions", json={}, headers=bearer(KEYS["run-a"]))
    raw = b"".join(f.read_bytes() for f in Path(db[len("sqlite:///"):]).parent.glob("gw.db*"))
    assert not any(key.encode() in raw for key in KEYS.values())
