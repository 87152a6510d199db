"""The Responses and Anthropic Messages APIs on the one call path, with the real `openai` and `anthropic` clients
against a real gateway (uvicorn, SQLite) whose instant backend answers with SmolLM2's real tokenizer and renderer:
every call a step with exact ids, multi-turn conversations that extend token for token, streamed answers stored
as the plain ones, each API's error shape, sessions created on first use, branches."""

from __future__ import annotations

import itertools
import json

import anthropic
import httpx
import openai
import pytest
from gateway_harness import serve

from agentr1.core.rendering import load_renderer
from agentr1.gateway.backends.instant import InstantBackend

CALL_TEXT = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n</tool_call>'
RESPONSES_TOOL = {"type": "function", "name": "calculator", "description": "arithmetic",
                  "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                 "required": ["expression"]}}
ANTHROPIC_TOOL = {"name": "calculator", "description": "arithmetic",
                  "input_schema": RESPONSES_TOOL["parameters"]}


@pytest.fixture(scope="module")
def renderer(smollm2_path):
    return load_renderer(smollm2_path)


@pytest.fixture()
def gateway(tmp_path, renderer):
    tok = renderer.tokenizer

    def reply(prompt_ids):  # a tool call when the last turn asks for arithmetic, else a short answer
        text = tok.decode(prompt_ids)
        if text.endswith("<tool_call>\n"):  # tool_choice required: the prompt opened the call
            return CALL_TEXT.split("\n", 1)[1] if "12*7" in text else "I would rather not."
        if text.endswith('"arguments":'):  # a named tool_choice: the prompt holds the call up to its arguments
            return ' {"expression": "12*7"}}\n</tool_call>'

        last = text.rsplit("<|im_start|>", 2)[-2]
        if last.startswith("user") and "12*7" in last:
            return CALL_TEXT
        return f"Answer number {text.count('<|im_start|>assistant')}."

    backend = InstantBackend(tok, reply, model_name="policy", max_context=4096)
    with serve(tmp_path / "gw.db", backend=backend, renderer=renderer) as (url, store):
        yield url, store


def _session(url):
    r = httpx.post(f"{url}/sessions", json={})
    assert r.status_code == 201, r.text
    return r.json()


def _without_ids(value):
    """A stored action or an answer with tool-call ids left out (each call draws fresh ids)."""
    text = json.dumps(value, default=lambda o: o.model_dump(), sort_keys=True)
    for marker in ('"id": "call_', '"call_id": "call_', '"id": "fc_'):
        while marker in text:
            start = text.index(marker) + len(marker) - len("call_" if "call_" in marker else "fc_")
            end = text.index('"', start)
            text = text[:start] + "ID" + text[end:]
    return json.loads(text)


def _same_step(a, b):
    assert (a.observation_ids, a.action_ids, _without_ids(a.action)) == \
        (b.observation_ids, b.action_ids, _without_ids(b.action))


def _chain_is_exact(steps):
    """Each step continues the one before it: its observation extends the previous observation + action."""
    for before, after in itertools.pairwise(steps):
        assert after.parent_index == before.index and not after.drift
        done = [*before.observation_ids, *before.action_ids]
        assert after.observation_ids[: len(done)] == done
        assert before.feedback_ids == after.observation_ids[len(done):]


# -- Responses ---------------------------------------------------------------------------------------


def test_responses_three_turns_with_a_function_call_extend_token_for_token(gateway):
    url, store = gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    first = client.responses.create(model="policy", instructions="You are a calculator.", input="what is 12*7?",
                                    tools=[RESPONSES_TOOL])
    call = next(item for item in first.output if item.type == "function_call")
    assert call.name == "calculator" and json.loads(call.arguments) == {"expression": "12*7"}
    assert first.usage.input_tokens > 0 and first.usage.input_tokens_details.cached_tokens == 0
    history = [{"role": "user", "content": "what is 12*7?"}, *[i.model_dump(exclude_none=True) for i in first.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": "84"}]
    second = client.responses.create(model="policy", instructions="You are a calculator.", input=history,
                                     tools=[RESPONSES_TOOL])
    assert second.output_text.startswith("Answer number")
    third = client.responses.create(model="policy", previous_response_id=second.id, input="thanks, and now?",
                                    tools=[RESPONSES_TOOL], instructions="You are a calculator.")
    steps = store.get_session(s["id"]).steps
    assert [st.index for st in steps] == [0, 1, 2] and third.output_text
    _chain_is_exact(steps)
    assert steps[0].messages_sent[0] == {"type": "instructions", "role": "system", "content": "You are a calculator."}
    assert steps[1].messages_sent[-1]["type"] == "function_call_output"  # as the agent sent it
    assert steps[2].messages_sent[-1] == {"role": "user", "content": "thanks, and now?"}
    assert [m["role"] for m in steps[2].messages_seen] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert steps[0].sampling["endpoint"] == "responses"
    assert client.responses.retrieve(third.id).id == third.id
    # as at OpenAI, instructions are not carried over from the previous response
    client.responses.create(model="policy", previous_response_id=third.id, input="bye", tools=[RESPONSES_TOOL])
    assert store.get_session(s["id"]).steps[3].messages_seen[0] == {"role": "user", "content": "what is 12*7?"}


def test_responses_stream_sends_the_event_sequence_and_stores_the_same_step(gateway):
    url, store = gateway
    plain_session, streamed_session = _session(url), _session(url)
    kwargs = {"model": "policy", "input": "what is 12*7?", "tools": [RESPONSES_TOOL]}
    plain = openai.OpenAI(base_url=plain_session["base_url"], api_key="x").responses.create(**kwargs)
    client = openai.OpenAI(base_url=streamed_session["base_url"], api_key="x")
    with client.responses.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    def shape(items):
        return [(i.type, getattr(i, "name", None), getattr(i, "arguments", None), i.status) for i in items]

    assert shape(final.output) == shape(plain.output) and final.output[0].type == "function_call"
    a, b = store.get_session(plain_session["id"]).steps, store.get_session(streamed_session["id"]).steps
    _same_step(a[0], b[0])

    text_kwargs = {"model": "policy", "input": "hello"}
    events = list(client.responses.create(stream=True, **text_kwargs))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == "Answer number 1."


def test_responses_errors_are_openai_shaped(gateway):
    url, _store = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="nope", input="hi")
    assert err.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="policy", input="hi", previous_response_id="resp_unknown")
    for body in ({"model": "policy"}, {"model": "policy", "input": [{"type": "message", "role": "user"}]},
                 {"model": "policy", "input": [{"type": "web_search_call"}]},
                 {"model": "policy", "input": "hi", "tools": [{"type": "function", "name": "f",
                                                                "parameters": {"type": "no-such-type"}}]},
                 {"model": "policy", "input": "hi", "text": {"format": {"type": "xml"}}}):
        r = httpx.post(f"{url}/v1/responses", json=body)
        assert r.status_code == 400, (body, r.text)
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


# -- Anthropic Messages --------------------------------------------------------------------------------


def _anthropic(base_url, key="x"):
    return anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key=key, max_retries=0)


def test_messages_three_turns_with_tool_use_extend_token_for_token(gateway):
    url, store = gateway
    s = _session(url)
    client = _anthropic(f"{url}/v1", key=s["api_key"])  # attributed by x-api-key alone
    messages = [{"role": "user", "content": "what is 12*7?"}]
    first = client.messages.create(model="policy", max_tokens=64, system="You are a calculator.",
                                   messages=messages, tools=[ANTHROPIC_TOOL])
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "calculator" and use.input == {"expression": "12*7"}
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "84"}]}]
    second = client.messages.create(model="policy", max_tokens=64, system="You are a calculator.",
                                    messages=messages, tools=[ANTHROPIC_TOOL])
    assert second.stop_reason == "end_turn" and second.content[0].text.startswith("Answer number")
    messages += [{"role": "assistant", "content": second.content[0].text},
                 {"role": "user", "content": [{"type": "text", "text": "and then?"}]}]
    client.messages.create(model="policy", max_tokens=64, system=[{"type": "text", "text": "You are a calculator."}],
                           messages=messages, tools=[ANTHROPIC_TOOL])
    steps = store.get_session(s["id"]).steps
    assert [st.index for st in steps] == [0, 1, 2]
    _chain_is_exact(steps)
    assert steps[1].messages_sent[-1]["content"][0]["type"] == "tool_result"  # as the agent sent it
    assert steps[1].messages_seen[-1] == {"role": "tool", "tool_call_id": use.id, "content": "84"}
    assert client.messages.count_tokens(model="policy", messages=messages[:1]).input_tokens > 0


def test_messages_stream_sends_anthropic_events_and_stores_the_same_step(gateway):
    url, store = gateway
    plain_session, streamed_session = _session(url), _session(url)
    kwargs = {"model": "policy", "max_tokens": 64, "messages": [{"role": "user", "content": "what is 12*7?"}],
              "tools": [ANTHROPIC_TOOL]}
    plain = _anthropic(plain_session["base_url"]).messages.create(**kwargs)
    with _anthropic(streamed_session["base_url"]).messages.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_start" in kinds
    assert final.stop_reason == plain.stop_reason == "tool_use"
    assert _without_ids(final.content) == _without_ids(plain.content)
    a, b = store.get_session(plain_session["id"]).steps, store.get_session(streamed_session["id"]).steps
    _same_step(a[0], b[0])

    with _anthropic(streamed_session["base_url"]).messages.stream(
            model="policy", max_tokens=64, messages=[{"role": "user", "content": "hello"}]) as stream:
        text = "".join(stream.text_stream)
    assert text == "Answer number 1."


def test_messages_errors_are_anthropic_shaped(gateway):
    url, _store = gateway
    client = _anthropic(f"{url}/v1")
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "not_found_error"
    for body in ({"model": "policy", "messages": [{"role": "user", "content": "hi"}]},  # no max_tokens
                 {"model": "policy", "max_tokens": 8, "messages": [{"role": "user"}]},
                 {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
                 {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                  "tools": [{"name": "f", "input_schema": {"type": 7}}]},
                 {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                  "tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "tool", "name": "not_offered"}}):
        r = httpx.post(f"{url}/v1/messages", json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"


# -- across formats ------------------------------------------------------------------------------------


def test_a_session_named_in_the_url_is_created_on_first_use_and_may_mix_formats(gateway):
    url, store = gateway
    base = f"{url}/sessions/my-run-17/v1"
    chat = openai.OpenAI(base_url=base, api_key="x").chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hello"}])
    reply = chat.choices[0].message.content
    follow = _anthropic(base).messages.create(model="policy", max_tokens=32, messages=[
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": reply},
        {"role": "user", "content": "more"}])
    assert follow.content[0].text
    steps = store.get_session("my-run-17").steps
    assert [st.sampling.get("endpoint", "chat") for st in steps] == ["chat", "messages"]
    _chain_is_exact(steps)
    bad = httpx.post(f"{url}/sessions/{'x' * 80}/v1/chat/completions",
                     json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]})
    assert bad.status_code in (400, 404)


def test_message_content_is_validated_per_api(gateway):
    url, _store = gateway
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "policy", "messages": [{"role": "user"}]})
    assert r.status_code == 400 and "content" in r.json()["error"]["message"]
    ok = httpx.post(f"{url}/v1/chat/completions", json={"model": "policy", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"}]})
    assert ok.status_code == 200, ok.text


def test_models_retrieval_and_chat_schema_checks(gateway):
    url, _store = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    assert client.models.retrieve("policy").id == "policy"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-17")
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "x"}}}
    for extra in ({"tools": [bad_tool]}, {"response_format": {"type": "yaml"}},
                  {"response_format": {"type": "json_object"}},
                  {"tools": [{"type": "function", "function": {"name": "f"}}],
                   "tool_choice": {"type": "function", "function": {"name": "g"}}}):
        r = httpx.post(f"{url}/v1/chat/completions",
                       json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], **extra})
        assert r.status_code == 400, (extra, r.text)
    for _ in range(2):  # each schema is checked once and remembered: the second answer is the same 400
        r = httpx.post(f"{url}/v1/chat/completions",
                       json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "tools": [bad_tool]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_tool_schema", r.text
        assert "tools[0] (f): parameters are not a valid JSON Schema: 'x' is not of type 'array'" in r.text


def test_a_forked_conversation_is_two_branches_with_the_right_parent(gateway):
    url, store = gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    system = {"role": "system", "content": "be brief"}
    history = [system, {"role": "user", "content": "hello"}]
    first = client.chat.completions.create(model="policy", messages=history).choices[0].message
    main = [*history, first.model_dump(exclude_none=True), {"role": "user", "content": "go on"}]
    second = client.chat.completions.create(model="policy", messages=main).choices[0].message
    client.chat.completions.create(model="policy", messages=[*main, second.model_dump(exclude_none=True),
                                                             {"role": "user", "content": "and?"}])
    # a retry with an edited last turn rewinds to step 0: it extends step 0 exactly, as a new branch
    fork = [*history, first.model_dump(exclude_none=True), {"role": "user", "content": "something else"}]
    client.chat.completions.create(model="policy", messages=fork)
    # a sub-agent starts its own conversation in the session: a new root branch, not drift
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "sub-task"}])
    steps = store.get_session(s["id"]).steps
    assert [(st.index, st.parent_index, st.drift) for st in steps] == \
        [(0, None, False), (1, 0, False), (2, 1, False), (3, 0, False), (4, None, False)]
    done = [*steps[0].observation_ids, *steps[0].action_ids]
    assert steps[3].observation_ids[: len(done)] == done  # the fork extends step 0 token for token
    report = httpx.get(f"{url}/sessions/{s['id']}").json()
    assert report["branches"] == [
        {"id": 0, "kind": "root", "parent_step": None, "steps": [0, 1, 2]},
        {"id": 1, "kind": "fork", "parent_step": 0, "steps": [3]},
        {"id": 2, "kind": "root", "parent_step": None, "steps": [4]},
    ]
    assert report["drift_steps"] == [] and report["superseded_steps"] == []


def test_tool_choice_required_or_named_gives_a_call_or_a_clear_422(gateway):
    url, store = gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"], max_retries=0)
    tool = {"type": "function", "function": {"name": "calculator", "parameters": RESPONSES_TOOL["parameters"]}}
    named = {"type": "function", "function": {"name": "calculator"}}
    for choice in ("required", named):
        r = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "what is 12*7?"}],
                                           tools=[tool], tool_choice=choice)
        assert r.choices[0].message.tool_calls[0].function.name == "calculator"
    with pytest.raises(openai.UnprocessableEntityError) as err:  # the model wrote no call: not content instead
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hello"}],
                                       tools=[tool], tool_choice="required")
    assert err.value.body["code"] == "tool_choice_not_satisfied"
    steps = store.get_session(s["id"]).steps
    assert len(steps) == 3 and steps[2].action["content"].endswith("I would rather not.")  # the sample is kept
    with pytest.raises(openai.APIError, match="no valid call"):  # streamed: the error in-band, no content chunk
        for chunk in client.chat.completions.create(model="policy", tools=[tool], tool_choice="required",
                                                    stream=True, messages=[{"role": "user", "content": "hello again"}]):
            assert not (chunk.choices and chunk.choices[0].delta.content)
