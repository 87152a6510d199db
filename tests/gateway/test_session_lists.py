"""Sessions opened and ended in lists (``POST /sessions`` with a list, ``POST /sessions/finish``) on a gateway
with access control: one transaction each, the single routes' checks on every item, real uvicorn and store."""

from __future__ import annotations

import httpx
import pytest
from gateway_harness import serve

from agentr1.core.rendering import load_renderer
from agentr1.gateway import AuthSettings
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.schemas import MAX_SESSIONS_PER_REQUEST

ADMIN, GATEWAY_KEY, RUN_KEY = "admin-secret-key", "gateway-wide-key", "run-a-key"
BODY = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture()
def locked(tmp_path, smollm2_path):
    renderer = load_renderer(smollm2_path)
    backend = InstantBackend(renderer.tokenizer, "ok", model_name="policy", max_context=2048)
    with serve(tmp_path / "gw.db", backend=backend, renderer=renderer,
               auth=AuthSettings(admin_key=ADMIN, api_key=GATEWAY_KEY, run_keys={"run-a": RUN_KEY})) as (url, store):
        yield url, store


def _auth(key):
    return {"Authorization": f"Bearer {key}"}


def _open(url, sessions, key=GATEWAY_KEY):
    r = httpx.post(f"{url}/sessions", json=sessions, headers=_auth(key))
    assert r.status_code == 201, r.text
    return r.json()


def test_a_list_opens_sessions_each_with_its_own_key(locked):
    url, store = locked
    opened = _open(url, [{"task_id": f"t{i}", "group_id": "g", "run_id": "lists", "metadata": {"sample": i}}
                         for i in range(3)])
    assert [s["task_id"] for s in opened] == ["t0", "t1", "t2"] and len({s["id"] for s in opened}) == 3
    for s in opened:
        assert s["base_url"].endswith(f"/sessions/{s['id']}/v1") and s["api_key"].startswith("a1s-")
        r = httpx.post(f"{s['base_url']}/chat/completions", json=BODY, headers=_auth(s["api_key"]))
        assert r.status_code == 200, r.text
    assert {s.id: len(store.get_session(s.id).steps) for s in store.list_sessions("lists")} == {
        s["id"]: 1 for s in opened}
    assert httpx.post(f"{url}/sessions", json=[], headers=_auth(GATEWAY_KEY)).json() == []


def test_a_list_with_one_bad_session_opens_none(locked):
    url, store = locked
    bad_context = [{"run_id": "none"}, {"run_id": "none", "context": {"policy": "no-such-policy"}}]
    r = httpx.post(f"{url}/sessions", json=bad_context, headers=_auth(GATEWAY_KEY))
    assert r.status_code == 400 and r.json()["error"]["param"] == "[1].context", r.text
    r = httpx.post(f"{url}/sessions", json=[{"session_id": "same"}, {"session_id": "same"}], headers=_auth(GATEWAY_KEY))
    assert r.status_code == 409 and r.json()["error"]["code"] == "session_exists", r.text
    r = httpx.post(f"{url}/sessions", json=[{"run_id": "none"}] * (MAX_SESSIONS_PER_REQUEST + 1),
                   headers=_auth(GATEWAY_KEY))
    assert r.status_code == 400 and r.json()["error"]["message"], r.text
    assert httpx.post(f"{url}/sessions", json=[{}], headers=_auth("wrong")).status_code == 401
    r = httpx.post(f"{url}/sessions", json=[{"run_id": "run-a"}, {"run_id": "run-b"}], headers=_auth(RUN_KEY))
    assert r.status_code == 403 and r.json()["error"]["param"] == "run_id", r.text  # a run key: its own run only
    assert store.list_sessions("none") == [] and store.list_sessions("run-a") == []
    assert [s.id for s in store.list_sessions(limit=1000)] == []


def test_a_list_ends_each_session_it_may_and_says_why_not_for_the_others(locked):
    url, store = locked
    mine, other, ended, keyless = _open(url, [{"run_id": "ends"} for _ in range(4)])
    httpx.post(f"{mine['base_url']}/chat/completions", json=BODY, headers=_auth(mine["api_key"]))
    r = httpx.post(f"{url}/sessions/{ended['id']}/finish", json={}, headers=_auth(ended["api_key"]))
    assert r.status_code == 200, r.text
    r = httpx.post(f"{url}/sessions/finish", json=[
        {"id": mine["id"], "api_key": mine["api_key"], "reward": 1.0},
        {"id": other["id"], "api_key": mine["api_key"]},  # another session's key
        {"id": ended["id"], "api_key": ended["api_key"], "status": "failed"},
        {"id": keyless["id"]},
        {"id": "no-such-session", "api_key": mine["api_key"]},
    ])
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["id"] for x in results] == [mine["id"], other["id"], ended["id"], keyless["id"], "no-such-session"]
    assert results[0] == {"id": mine["id"], "status": "finished"}
    assert [(x["status_code"], x["error"]["code"]) for x in results[1:]] == [
        (403, "forbidden"), (409, "session_finished"), (401, "invalid_api_key"), (403, "forbidden")]
    assert all(set(x["error"]) == {"message", "type", "param", "code"} for x in results[1:])
    record = store.get_session(mine["id"])
    assert (record.status, record.reward, len(record.steps)) == ("finished", 1.0, 1)
    assert store.get_session(ended["id"]).status == "finished"  # not turned "failed" by the refused end
    assert {store.get_session(s["id"]).status for s in (other, keyless)} == {"running"}
    r = httpx.post(f"{url}/sessions/finish", json=[{"id": other["id"], "status": "failed", "error": "x"},
                                                   {"id": "no-such-session"}], headers=_auth(ADMIN))
    assert [x.get("status") or x["status_code"] for x in r.json()["results"]] == ["failed", 404]
    r = httpx.post(f"{url}/sessions/finish", json=[{"id": keyless["id"], "reward": 2.0}, {"id": keyless["id"]}],
                   headers=_auth(ADMIN))
    assert [x.get("status") or x["error"]["code"] for x in r.json()["results"]] == ["finished", "session_finished"]
    assert store.get_session(keyless["id"]).reward == 2.0  # the same session twice: the first item ends it
    assert httpx.post(f"{url}/sessions/finish", json=[], headers=_auth(ADMIN)).json() == {"results": []}
    r = httpx.post(f"{url}/sessions/finish", json=[{"id": keyless["id"], "status": "paused"}], headers=_auth(ADMIN))
    assert r.status_code == 400 and r.json()["error"]["message"], r.text  # a bad item: a 400 for the request
    r = httpx.post(f"{url}/sessions/finish", json={"id": keyless["id"]}, headers=_auth(ADMIN))
    assert r.status_code == 400, r.text  # a list, not one object
