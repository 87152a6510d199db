"""The chat body is validated once per message: a session's next request reuses the validated dicts of the
history it repeats, validates the rest, and gives what validating it whole gives (messages, errors)."""

from __future__ import annotations

import json

import httpx
import pytest
from gateway_harness import serve

from agentr1.core.rendering import load_renderer
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.codecs.chat_body import MessagePrefixes
from agentr1.gateway.schemas import ChatCompletionRequest


@pytest.fixture(scope="module")
def gateway(smollm2_path, tmp_path_factory):
    renderer = load_renderer(smollm2_path)
    backend = InstantBackend(renderer.tokenizer, "4", model_name="policy")
    with serve(tmp_path_factory.mktemp("chat-body") / "t.db", backend=backend, renderer=renderer) as running:
        yield running


def _whole(messages):
    """The messages as validating the whole body gives them."""
    body = ChatCompletionRequest.model_validate({"model": "policy", "messages": messages})
    return body.model_dump(include={"messages"}, exclude_none=True)["messages"]


def _post(url, session, messages, **extra):
    return httpx.post(f"{url}/sessions/{session}/v1/chat/completions",
                      json={"model": "policy", "messages": messages, **extra}, timeout=30)


def test_a_growing_conversation_stores_what_whole_validation_gives(gateway):
    url, store = gateway
    messages = [{"role": "system", "content": "be brief", "name": None},
                {"role": "user", "content": [{"type": "text", "text": "2+2?"}], "extra": {"kept": None}}]
    sent = []
    for turn in range(4):
        r = _post(url, "grow", messages)
        assert r.status_code == 200, r.text
        sent.append([dict(m) for m in messages])
        # the client echoes the answer as the OpenAI client does (refusal: null), then asks again
        messages = [*messages, {**r.json()["choices"][0]["message"]},
                    {"role": "user", "content": f"and {turn}?", "tool_call_id": None}]
    steps = store.get_session("grow").steps
    assert [s.messages_sent for s in steps] == [_whole(m) for m in sent]
    assert all(s.drift is False for s in steps) and [s.parent_index for s in steps] == [None, 0, 1, 2]


def test_a_bad_new_message_is_reported_at_its_place_in_the_whole_list(gateway):
    url, _ = gateway
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4"},
               {"role": "user", "content": "again"}]
    assert _post(url, "bad", history).status_code == 200
    r = _post(url, "bad", [*history, {"role": "assistant", "content": "4"}, {"role": "robot", "content": "x"}])
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.4.role", r.text
    r = _post(url, "bad", [*history, {"role": "assistant", "content": None}, {"role": "user", "content": "x"}])
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.3", r.text
    raw = json.dumps({"model": "policy", "messages": [*history, {"role": "user", "content": "\ud800"}]})
    r = httpx.post(f"{url}/sessions/bad/v1/chat/completions", content=raw.encode(),
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and "Unicode" in r.json()["error"]["message"], r.text
    r = _post(url, "bad", history, temperature=9)  # the other fields are validated on every call
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature", r.text
    edited = [{"role": "user", "content": "hi"}, {"role": "nobody", "content": "4"}, *history[2:]]
    r = _post(url, "bad", edited)  # a changed history is validated from the first change
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.1.role", r.text
    r = httpx.post(f"{url}/sessions/bad/v1/chat/completions", content=b'{"model": "policy", "messages": [',
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("request body is not valid JSON"), r.text
    r = httpx.post(f"{url}/sessions/bad/v1/chat/completions", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", r.text


def test_the_schema_still_describes_the_body(gateway):
    url, _ = gateway
    spec = httpx.get(f"{url}/openapi.json", timeout=30).json()
    body = spec["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"model", "messages"} <= set(body["required"])
    assert "role" in body["properties"]["messages"]["items"]["properties"]


def test_prefixes_reuse_the_validated_dicts_up_to_the_first_change():
    prefixes = MessagePrefixes(capacity=2)
    raw = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "refusal": None}]
    valid = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    prefixes.remember("s", raw, valid)
    n, reused = prefixes.shared("s", [dict(m) for m in raw] + [{"role": "user", "content": "c"}])
    assert n == 2 and reused[0] is valid[0] and reused[1] is valid[1]
    assert prefixes.shared("s", [raw[0], {"role": "assistant", "content": "B"}])[0] == 1
    assert prefixes.shared("s", raw[:1])[0] == 1 and prefixes.shared("other", raw) == (0, [])
    assert prefixes.shared(None, raw) == (0, [])
    prefixes.remember("t", raw, valid)
    prefixes.remember("u", raw, valid)  # capacity 2: "s" is forgotten
    assert prefixes.shared("s", raw) == (0, [])
