"""The gateway's HTTP API with the instant backend: real uvicorn, real openai client, real store.

The instant backend answers with scripted text, so these tests check the gateway itself: OpenAI
shapes, tool calls, streaming, sessions, attribution, errors and persistence."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from gateway_harness import serve

from agentr1.core.generation import BackendError
from agentr1.core.rendering import load_renderer
from agentr1.gateway import AuthSettings
from agentr1.gateway.backends.instant import InstantBackend

TOOL = {"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                          "parameters": {"type": "object",
                                                         "properties": {"expression": {"type": "string"}}}}}
CALL_TEXT = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n</tool_call>'


@pytest.fixture(scope="module")
def renderer(smollm2_path):
    return load_renderer(smollm2_path)


def _reply(prompt_ids):  # a tool call first, then a final answer once a tool result is in the prompt
    return "The answer is 84." if _reply.tok.decode(prompt_ids).count("<tool_response>") else CALL_TEXT


@pytest.fixture()
def gateway(tmp_path, renderer):
    _reply.tok = renderer.tokenizer
    backend = InstantBackend(renderer.tokenizer, _reply, model_name="policy", max_context=2048)
    with serve(tmp_path / "gw.db", backend=backend, renderer=renderer,
               auth=AuthSettings(admin_key="admin-secret")) as (url, store):
        yield url, store, backend


def _session(url, **body):
    r = httpx.post(f"{url}/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def test_tool_call_then_answer_two_exact_steps(gateway):
    url, store, _ = gateway
    s = _session(url, task_id="t1", group_id="g1", run_id="r1")
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    messages = [{"role": "user", "content": "What is 12*7?"}]
    first = client.chat.completions.create(model="policy", messages=messages, tools=[TOOL])
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "calculator" and json.loads(call.function.arguments) == {"expression": "12*7"}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "84"}]
    second = client.chat.completions.create(model="policy", messages=messages, tools=[TOOL])
    assert second.choices[0].message.content == "The answer is 84."
    assert second.choices[0].finish_reason == "stop"

    trace = store.get_session(s["id"])  # durable writes: answered means stored, no flush needed
    assert [st.index for st in trace.steps] == [0, 1]
    one, two = trace.steps
    assert two.observation_ids[: len(one.observation_ids) + len(one.action_ids)] == one.observation_ids + one.action_ids
    assert not two.drift and two.parent_index == 0
    assert one.feedback_messages == [messages[-1]] and one.feedback_ids
    assert two.observation_ids[len(one.observation_ids) + len(one.action_ids):][: len(one.feedback_ids)] == one.feedback_ids
    assert one.action["tool_calls"][0]["function"]["name"] == "calculator"
    assert len(one.action_logprobs) == len(one.action_ids)
    assert trace.run_id == "r1" and trace.task_id == "t1" and trace.group_id == "g1"


def test_streaming_matches_the_stored_step(gateway):
    url, store, _ = gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    chunks = list(client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "12*7?"}], tools=[TOOL], stream=True,
        stream_options={"include_usage": True}))
    tool_deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert tool_deltas[0].function.name == "calculator"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    step = store.get_session(s["id"]).steps[0]
    assert chunks[-1].usage.completion_tokens == len(step.action_ids)
    assert chunks[-1].usage.prompt_tokens == len(step.observation_ids)


def test_streamed_text_equals_non_streamed(tmp_path, renderer):
    backend = InstantBackend(renderer.tokenizer, "Hello <b>there</b>, 3 < 4 and 5 > 2!", model_name="policy")
    with serve(tmp_path / "s.db", backend=backend, renderer=renderer) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
        body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
        whole = client.chat.completions.create(**body).choices[0].message.content
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**body, stream=True)
                           if c.choices)
    assert streamed == whole == "Hello <b>there</b>, 3 < 4 and 5 > 2!"


def test_attribution_by_header_baggage_and_key(gateway):
    url, store, _ = gateway
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    s1, s2, s3 = _session(url), _session(url), _session(url)
    # this gateway has an admin key: a call naming a session must carry that session's key
    assert httpx.post(f"{url}/v1/chat/completions", json=body, headers={
        "X-Agentr1-Session": s1["id"], "X-Agentr1-Session-Key": s1["api_key"]}).status_code == 200
    r = httpx.post(f"{url}/v1/chat/completions", json=body, headers={
        "baggage": f"foo=1,agentr1.session={s2['id']}", "Authorization": f"Bearer {s2['api_key']}"})
    assert r.status_code == 200 and r.json()["agentr1"]["session_id"] == s2["id"]
    openai.OpenAI(base_url=f"{url}/v1", api_key=s3["api_key"]).chat.completions.create(**body)
    for s in (s1, s2, s3):
        assert len(store.get_session(s["id"]).steps) == 1
    r = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": "Bearer a1s-not-a-real-key"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_unattributed_calls_follow_the_conversation(gateway):
    url, store, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="anything")
    ids = set()
    for question in ("first?", "second?"):
        messages = [{"role": "user", "content": question}]
        r1 = client.chat.completions.with_raw_response.create(model="policy", messages=messages, tools=[TOOL])
        msg = r1.parse().choices[0].message
        messages += [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "84"}]
        r2 = client.chat.completions.with_raw_response.create(model="policy", messages=messages, tools=[TOOL])
        sid = r1.headers["x-agentr1-session"]
        assert r2.headers["x-agentr1-session"] == sid  # the second turn joined the first turn's session
        ids.add(sid)
        steps = store.get_session(sid).steps
        assert len(steps) == 2 and not steps[1].drift
    assert len(ids) == 2  # two conversations, two sessions


def test_rewards_finish_and_trace(gateway):
    url, _store, _ = gateway
    s = _session(url, task_id="t")
    headers = {"Authorization": f"Bearer {s['api_key']}"}
    openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"]).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hi"}])
    assert httpx.post(f"{url}/sessions/{s['id']}/rewards", json={"value": 0.5, "step": 0},
                      headers=headers).status_code == 201
    r = httpx.post(f"{url}/sessions/{s['id']}/rewards", json={"value": 1, "step": 7}, headers=headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "step_not_found"
    assert httpx.post(f"{url}/sessions/{s['id']}/finish", json={"reward": 1.0}, headers=headers).status_code == 200
    trace = httpx.get(f"{url}/sessions/{s['id']}", headers=headers).json()
    assert trace["status"] == "finished" and trace["reward"] == 1.0 and trace["steps"][0]["reward"] == 0.5
    again = httpx.post(f"{url}/sessions/{s['id']}/finish", json={}, headers=headers)
    assert again.status_code == 409
    late = httpx.post(f"{s['base_url']}/chat/completions", json={"model": "policy", "messages": [
        {"role": "user", "content": "hi"}]}, headers=headers)
    assert late.status_code == 409 and late.json()["error"]["code"] == "session_finished"
    other = _session(url)
    forbidden = httpx.get(f"{url}/sessions/{s['id']}", headers={"Authorization": f"Bearer {other['api_key']}"})
    assert forbidden.status_code == 403


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}, 404, "model_not_found"),
    ({"model": "policy"}, 400, "invalid_request"),
    ({"model": "policy", "messages": [{"role": "wizard", "content": "x"}]}, 400, "invalid_request"),
    ({"model": "policy", "messages": [{"role": "user", "content": "x"}], "temperature": 9}, 400, "invalid_request"),
    ({"model": "policy", "messages": [{"role": "user", "content": "x " * 3000}]}, 400, "context_length_exceeded"),
    ({"model": "policy", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}, 400,
     "context_length_exceeded"),
    ({"model": "policy", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, 400,
     "invalid_request"),
])
def test_bad_requests_get_openai_errors(gateway, body, status, code):
    url, _, _ = gateway
    r = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["message"] and err["type"]


def test_malformed_json_unknown_session_and_big_body(gateway):
    url, _, _ = gateway
    r = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/sessions/nope/v1/chat/completions", headers={"Authorization": "Bearer admin-secret"},
                   json={"model": "policy", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
    r = httpx.post(f"{url}/v1/chat/completions", content=b"x" * (9 * 1024 * 1024),
                   headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_backend_failures_are_502_or_503_with_retry_after(gateway):
    url, _store, backend = gateway
    body = {"model": "policy", "messages": [{"role": "user", "content": "x"}]}
    backend.fail_with = BackendError("engine crashed")
    r = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert r.status_code == 502 and r.headers["retry-after"] and r.json()["error"]["code"] == "backend_error"
    backend.fail_with = None
    admin = {"Authorization": "Bearer admin-secret"}
    assert httpx.post(f"{url}/admin/pause", headers=admin).status_code == 200
    r = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert httpx.get(f"{url}/ready").status_code == 503
    assert httpx.post(f"{url}/admin/resume", headers=admin).status_code == 200
    assert httpx.post(f"{url}/v1/chat/completions", json=body).status_code == 200


def test_admin_needs_the_admin_key(gateway):
    url, _, backend = gateway
    assert httpx.post(f"{url}/admin/pause").status_code == 401
    assert httpx.post(f"{url}/admin/pause", headers={"Authorization": "Bearer wrong"}).status_code == 401
    r = httpx.post(f"{url}/admin/weights", json={"path": "/tmp/x"}, headers={"Authorization": "Bearer admin-secret"})
    assert r.status_code == 200 and r.json()["policy_version"] == 1 == backend.policy_version


def test_completions_text_and_token_ids(gateway, renderer):
    url, store, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
    r = client.completions.create(model="policy", prompt="2+2=", max_tokens=8)
    assert r.choices[0].text
    ids = renderer.tokenizer.encode("2+2=", add_special_tokens=False)
    raw = httpx.post(f"{url}/v1/completions", json={"model": "policy", "prompt": ids, "logprobs": 1}).json()
    steps = store.get_session(raw["agentr1"]["session_id"]).steps
    assert steps[-1].observation_ids == ids
    assert len(raw["choices"][0]["logprobs"]["token_logprobs"]) == len(steps[-1].action_ids)
    bad = httpx.post(f"{url}/v1/completions", json={"model": "policy", "prompt": [10**9]})
    assert bad.status_code == 400


def test_models_health_metrics(gateway):
    url, _, _ = gateway
    assert [m.id for m in openai.OpenAI(base_url=f"{url}/v1", api_key="x").models.list()] == ["policy"]
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}
    openai.OpenAI(base_url=f"{url}/v1", api_key="x").chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "x"}])
    text = httpx.get(f"{url}/metrics").text
    assert "agentr1_calls_total 1" in text and "agentr1_store_steps_committed_total 1" in text


def test_backend_dying_mid_stream_reports_in_band_and_stores_nothing(gateway):
    url, store, backend = gateway
    s = _session(url)
    backend.die_after_tokens = 3
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"], max_retries=0)
    with pytest.raises(openai.APIError, match="died mid-stream"):
        for _ in client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "x"}],
                                                stream=True):
            pass
    backend.die_after_tokens = None
    assert store.get_session(s["id"]).steps == []  # an unanswered call is not a step
    ok = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "x"}], tools=[TOOL])
    assert ok.choices[0].message.tool_calls and len(store.get_session(s["id"]).steps) == 1


def test_rewritten_history_is_drift_and_counted(gateway):
    url, store, _ = gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "12*7?"}]
    first = client.chat.completions.create(model="policy", messages=messages, tools=[TOOL]).choices[0].message
    edited = [{"role": "system", "content": "be very brief"}, messages[1], first.model_dump(exclude_none=True),
              {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "84"}]
    client.chat.completions.create(model="policy", messages=edited, tools=[TOOL])
    steps = store.get_session(s["id"]).steps
    assert [st.drift for st in steps] == [False, True]
    assert steps[0].feedback_ids is None  # no exact e_t when the history was rewritten
    assert "agentr1_drift_total 1" in httpx.get(f"{url}/metrics").text


def test_n_choices_are_steps_and_the_next_call_continues_the_chosen_one(gateway):
    url, store, _ = gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    messages = [{"role": "user", "content": "12*7?"}]
    r = client.chat.completions.create(model="policy", messages=messages, tools=[TOOL], n=3)
    assert len(r.choices) == 3
    chosen = r.choices[2].message
    messages += [chosen.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": chosen.tool_calls[0].id, "content": "84"}]
    client.chat.completions.create(model="policy", messages=messages, tools=[TOOL])
    steps = store.get_session(s["id"]).steps
    assert [st.index for st in steps] == [0, 1, 2, 3]
    assert steps[3].parent_index == 2 and not steps[3].drift
    assert steps[2].feedback_ids and steps[0].feedback_ids is None


def test_tool_markup_without_tools_offered_is_plain_content(gateway):
    url, _store, _ = gateway
    s = _session(url)
    r = httpx.post(f"{s['base_url']}/chat/completions", json={"model": "policy", "messages": [
        {"role": "user", "content": "12*7?"}]}, headers={"Authorization": f"Bearer {s['api_key']}"}).json()
    choice = r["choices"][0]
    assert choice["finish_reason"] == "stop" and not choice["message"].get("tool_calls")
    assert '"calculator"' in choice["message"]["content"]


def test_streamed_final_chunk_names_the_step(gateway):
    url, _store, _ = gateway
    s = _session(url)
    with httpx.stream("POST", f"{s['base_url']}/chat/completions", json={
            "model": "policy", "messages": [{"role": "user", "content": "x"}], "stream": True},
            headers={"Authorization": f"Bearer {s['api_key']}"}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    final = [e for e in events if e.get("choices") and e["choices"][0]["finish_reason"]]
    assert final[0]["agentr1"] == {"session_id": s["id"], "steps": [0], "drift": False}
