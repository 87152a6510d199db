"""Context policies through the real gateway (instant backend, SmolLM2 renderer, real openai client):
what the model saw is what the policy says, the trace keeps messages_sent and messages_seen, and
drift marks exactly the calls whose seen history was rewritten."""

from __future__ import annotations

import asyncio
import itertools
import json
from contextlib import contextmanager

import httpx
import openai
import pytest
from gateway_harness import serve
from typer.testing import CliRunner

from agentr1.core.rendering import load_renderer
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.context import (
    SUMMARY_INSTRUCTIONS,
    SUMMARY_PREFIX,
    ContextPolicyError,
    build_policy,
)
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore

TOOL = {"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                          "parameters": {"type": "object",
                                                         "properties": {"expression": {"type": "string"}}}}}
SYSTEM = {"role": "system", "content": "You are a careful calculator agent."}
TASK = {"role": "user", "content": "Add up the numbers one step at a time."}
BACKEND_SUMMARY = "The assistant added numbers with the calculator."


@pytest.fixture(scope="module")
def renderer(smollm2_path):
    return load_renderer(smollm2_path)


def _backend(renderer):
    count = {"n": 0}

    def reply(prompt_ids):  # a new tool call each time; a summary when asked for one
        if SUMMARY_INSTRUCTIONS in renderer.tokenizer.decode(prompt_ids):
            return BACKEND_SUMMARY
        count["n"] += 1
        return f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{count["n"]}+1"}}}}\n</tool_call>'

    return InstantBackend(renderer.tokenizer, reply, model_name="policy", max_context=4096)


@contextmanager
def _gateway(tmp_path, renderer, *, summarizer=None, db="gw.db", **settings):
    backend = _backend(renderer)
    if summarizer is None:
        with serve(tmp_path / db, backend=backend, renderer=renderer, **settings) as (url, store):
            yield url, store, backend
        return
    store = TraceStore.open(str(tmp_path / db))
    app = create_app(GatewaySettings(model="tiny", db=str(tmp_path / db), **settings), store=store, backend=backend,
                     renderer=renderer, summarizer=summarizer)
    try:
        with BackgroundServer(app) as url:
            yield url, store, backend
    finally:
        store.close()


def _session(url, **body):
    r = httpx.post(f"{url}/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def _agent(session, calls, tool_output=lambda i: f"result-{i}"):
    """An unmodified tool-calling agent: ``calls`` model calls, each answered with a tool result."""
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["api_key"])
    messages = [SYSTEM, TASK]
    sent = []
    for i in range(calls):
        sent.append(list(messages))
        reply = client.chat.completions.create(model="policy", messages=messages, tools=[TOOL])
        message = reply.choices[0].message
        messages = [*messages, message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": tool_output(i)}]
    return sent, messages


def _seen_by_model(renderer, step):
    return renderer.tokenizer.decode(step.observation_ids)


def _assert_exact_continuation(steps):
    for prev, step in itertools.pairwise(steps):
        if not step.drift:
            assert step.observation_ids[: len(prev.observation_ids) + len(prev.action_ids)] == \
                prev.observation_ids + prev.action_ids


def _roles(messages):
    return [m["role"] for m in messages]


def test_append_only_is_the_default_and_continues_exactly(tmp_path, renderer):
    with _gateway(tmp_path, renderer) as (url, store, _):
        s = _session(url)
        assert s["context"] is None
        sent, _ = _agent(s, 5)
        steps = store.get_session(s["id"]).steps
    assert [st.drift for st in steps] == [False] * 5
    assert [st.parent_index for st in steps] == [None, 0, 1, 2, 3]
    for st, request in zip(steps, sent, strict=True):
        assert st.messages_seen == st.messages_sent == request
    _assert_exact_continuation(steps)


def test_sliding_window_keeps_head_and_last_turns_and_drifts_once_it_slides(tmp_path, renderer):
    with _gateway(tmp_path, renderer) as (url, store, _):
        s = _session(url, context={"policy": "sliding_window", "keep_last_turns": 2})
        assert s["context"] == {"policy": "sliding_window", "keep_last_turns": 2}
        sent, _ = _agent(s, 6)
        trace = store.get_session(s["id"])
    assert trace.metadata["context"] == {"policy": "sliding_window", "keep_last_turns": 2}
    steps = trace.steps
    # calls 0-2 carry 0-2 turns (within the window): exact continuation; from call 3 on, the window slides
    assert [st.drift for st in steps] == [False, False, False, True, True, True]
    _assert_exact_continuation(steps)
    for i, (st, request) in enumerate(zip(steps, sent, strict=True)):
        assert st.messages_sent == request  # the trace keeps what the agent sent...
        expected = request if i <= 2 else [SYSTEM, TASK, *request[-4:]]  # ...and what the model saw
        assert st.messages_seen == expected
        text = _seen_by_model(renderer, st)
        if st.drift:  # a fresh render of exactly the seen messages
            assert st.observation_ids == renderer.render(expected, [TOOL], add_generation_prompt=True)
        assert TASK["content"] in text and SYSTEM["content"] in text
        for j in range(i):  # tool outputs of dropped turns are gone, those of kept turns are there
            assert (f"result-{j}" in text) == (i <= 2 or j >= i - 2)
    # a turn is never split: the seen history after the head starts with an assistant tool call
    assert _roles(steps[5].messages_seen) == ["system", "user", "assistant", "tool", "assistant", "tool"]


def test_truncate_tool_outputs_cuts_only_long_outputs_and_still_continues(tmp_path, renderer):
    tok = renderer.tokenizer
    long_output = " ".join(f"row {k}: value {k * 7}" for k in range(60))

    def output(i):
        return long_output if i == 1 else f"result-{i}"

    with _gateway(tmp_path, renderer) as (url, store, _):
        s = _session(url, context={"policy": "truncate_tool_outputs", "max_tool_tokens": 20})
        sent, _ = _agent(s, 5, output)
        steps = store.get_session(s["id"]).steps
    # the truncated output is truncated the same way on every later call: no drift, exact continuation
    assert [st.drift for st in steps] == [False] * 5
    _assert_exact_continuation(steps)
    n = len(tok.encode(long_output, add_special_tokens=False))
    cut = tok.decode(tok.encode(long_output, add_special_tokens=False)[:20]) + f"\n... [truncated {n - 20} tokens]"
    for i, (st, request) in enumerate(zip(steps, sent, strict=True)):
        assert st.messages_sent == request
        if i < 2:
            assert st.messages_seen == request
            continue
        long_index = 5  # system, task, (assistant, tool) x 2 -> the second tool message
        assert st.messages_sent[long_index]["content"] == long_output
        assert st.messages_seen[long_index] == {**request[long_index], "content": cut}
        assert [m for k, m in enumerate(st.messages_seen) if k != long_index] == \
               [m for k, m in enumerate(request) if k != long_index]
        text = _seen_by_model(renderer, st)
        assert f"[truncated {n - 20} tokens]" in text and "row 59" not in text and "result-0" in text


def test_summary_replaces_old_turns_with_one_summary(tmp_path, renderer):
    asked = []

    async def summarizer(messages):
        asked.append(messages)
        return f"{len(messages)} earlier messages: " + ", ".join(m["content"] for m in messages if m["role"] == "tool")

    with _gateway(tmp_path, renderer, summarizer=summarizer) as (url, store, _):
        s = _session(url, context={"policy": "summary", "keep_last_turns": 2})
        assert s["context"] == {"policy": "summary", "keep_last_turns": 2, "max_summary_tokens": 256}
        sent, _ = _agent(s, 5)
        # the agent sends its last request again: the cached summary gives the same prompt, so it is a
        # sibling of the last step (same parent, same drift as that step), not a new drift
        client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
        client.chat.completions.create(model="policy", messages=sent[-1], tools=[TOOL])
        steps = store.get_session(s["id"]).steps
    assert [st.drift for st in steps] == [False, False, False, True, True, True]
    _assert_exact_continuation(steps[:5])
    assert steps[5].observation_ids == steps[4].observation_ids
    assert steps[5].parent_index == steps[4].parent_index == 3
    assert asked == [sent[3][2:4], sent[4][2:6]]  # the dropped turns, each summarized once
    for i, st in enumerate(steps[:5]):
        assert st.messages_sent == sent[i]
        if i <= 2:
            assert st.messages_seen == sent[i]
            continue
        summary = {"role": "user", "content": SUMMARY_PREFIX + ("2 earlier messages: result-0" if i == 3 else
                                                                 "4 earlier messages: result-0, result-1")}
        assert st.messages_seen == [SYSTEM, TASK, summary, *sent[i][-4:]]
        assert summary["content"] in _seen_by_model(renderer, st)


def test_summary_by_the_gateways_own_backend(tmp_path, renderer):
    with _gateway(tmp_path, renderer) as (url, store, backend):
        s = _session(url, context={"policy": "summary", "keep_last_turns": 1})
        sent, _ = _agent(s, 3)
        steps = store.get_session(s["id"]).steps
    assert len(steps) == 3 and backend.calls == 3 + 1  # the summary call is not a step of the session
    assert [st.drift for st in steps] == [False, False, True]
    assert steps[2].messages_seen == [SYSTEM, TASK, {"role": "user", "content": SUMMARY_PREFIX + BACKEND_SUMMARY},
                                      *sent[2][-2:]]


def test_bad_policies_are_refused_listing_the_valid_ones(tmp_path, renderer):
    with _gateway(tmp_path, renderer) as (url, _, _):
        for context, needle in (({"policy": "forgetful"}, "valid: append_only, sliding_window, summary, "
                                                          "truncate_tool_outputs"),
                                ({"policy": "sliding_window", "keep_last_turns": 0}, "keep_last_turns"),
                                ({"policy": "truncate_tool_outputs", "max_tokens": 5}, "max_tokens"),
                                ("nope", "unknown context policy 'nope'")):
            r = httpx.post(f"{url}/sessions", json={"context": context})
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert needle in error["message"] and error["param"] == "context"
        # the policy may also come in metadata (as the SDK passes it) and is stored normalised
        r = _session(url, metadata={"context": "sliding_window", "tag": 1})
        assert r["context"] == {"policy": "sliding_window", "keep_last_turns": 4}
    with pytest.raises(ContextPolicyError, match="valid: append_only"):
        create_app(GatewaySettings(model="tiny", context_policy="forgetful"))
    with pytest.raises(ContextPolicyError):
        build_policy({"policy": "summary", "keep_last_turns": "many"})


def test_gateway_default_applies_to_sessions_without_a_choice_and_survives_a_restart(tmp_path, renderer):
    default = json.dumps({"policy": "sliding_window", "keep_last_turns": 1})
    with _gateway(tmp_path, renderer, context_policy=default) as (url, store, _):
        plain = _session(url)
        chose = _session(url, context="append_only")
        sent, messages = _agent(plain, 3)
        _agent(chose, 3)
        # an unattributed call goes to an auto session, with the gateway's default
        auto = httpx.post(f"{url}/v1/chat/completions", json={"model": "policy", "messages": sent[2], "tools": [TOOL]})
        assert auto.status_code == 200
        auto_step = store.get_session(auto.json()["agentr1"]["session_id"]).steps[0]
        assert auto_step.messages_seen == [SYSTEM, TASK, *sent[2][-2:]]
        assert [st.drift for st in store.get_session(plain["id"]).steps] == [False, False, True]
        assert [st.drift for st in store.get_session(chose["id"]).steps] == [False, False, False]
    # a restarted gateway (default append_only now) still applies each session's stored choice
    with _gateway(tmp_path, renderer) as (url, store, _):
        s = _session(url, context={"policy": "sliding_window", "keep_last_turns": 1})
        httpx.post(f"{url}/sessions/{s['id']}/v1/chat/completions",
                   json={"model": "policy", "messages": [SYSTEM, TASK], "tools": [TOOL]})
    with _gateway(tmp_path, renderer) as (url, store, _):
        client = openai.OpenAI(base_url=f"{url}/sessions/{s['id']}/v1",
                               api_key=s["api_key"])
        client.chat.completions.create(model="policy", messages=messages, tools=[TOOL])
        step = store.get_session(s["id"]).steps[-1]
        assert step.messages_seen == [SYSTEM, TASK, *messages[-2:]] and step.drift


def test_cli_context_policy_flag(monkeypatch):
    import typer

    from agentr1.cli.gateway import gateway

    seen: dict = {}
    monkeypatch.setattr("agentr1.gateway.create_app", lambda settings: seen.setdefault("settings", settings))
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: None)
    app = typer.Typer()
    app.command()(gateway)
    result = CliRunner().invoke(app, ["--context-policy", "truncate_tool_outputs"])
    assert result.exit_code == 0, result.output
    assert seen["settings"].context_policy == "truncate_tool_outputs"
    seen.clear()
    result = CliRunner().invoke(app, ["--context-policy", "forgetful"])
    assert result.exit_code == 2 and "valid: append_only" in result.output and not seen


def test_sliding_window_never_separates_tool_calls_from_their_results():
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "calculator", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]}
    messages = [{"role": "developer", "content": "sys"}, {"role": "user", "content": "task"},
                {"role": "assistant", "content": "first"}, {"role": "user", "content": "more"},
                call, {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "b", "content": "2"}, {"role": "user", "content": "and?"}]
    policy = build_policy({"policy": "sliding_window", "keep_last_turns": 1})
    seen = asyncio.run(policy.apply(messages, None))
    assert seen == [*messages[:2], *messages[4:]]
    assert asyncio.run(build_policy("sliding_window").apply(messages, None)) is messages
