"""What the official `openai` and `anthropic` clients see of the last conformance gaps of issue 40, against a real
gateway (uvicorn, SQLite) on the embedded engine with a tiny random Llama (SmolLM2's tokenizer and tool template):
streamed logprobs with alternatives for every token, echoed prompts with logprobs and continuous text offsets, a
forced call cut short by max_tokens answered with finish_reason "length", parallel forced calls, malformed ids."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
import xgrammar as xgr
from gateway_harness import serve

from agentr1.engine import EngineOptions
from agentr1.gateway.codecs.constraints import MAX_PARALLEL_CALLS, tool_call_grammar

TOOL = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string", "maxLength": 8}}, "required": ["expression"]}}}
ASK = [{"role": "user", "content": "what is 12*7?"}]


@pytest.fixture(scope="module")
def url(tiny_model_path, tmp_path_factory):
    with serve(tmp_path_factory.mktemp("conformance") / "c.db", model=str(tiny_model_path), accept_any_model=True,
               engine=EngineOptions(device="cpu")) as (gateway_url, _):
        yield gateway_url


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def test_streamed_chat_carries_top_logprobs_for_every_token(client):
    entries = []
    for chunk in client.chat.completions.create(model="policy", messages=ASK, max_tokens=24, seed=1, stream=True,
                                                logprobs=True, top_logprobs=3):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            entries.extend(chunk.choices[0].logprobs.content)
    assert len(entries) >= 10
    assert all(len(e.top_logprobs) == 3 for e in entries), [len(e.top_logprobs) for e in entries]


def test_streamed_completions_carry_top_logprobs_echo_and_continuous_offsets(client):
    prompt = "The capital of France is"
    chunks = list(client.completions.create(model="policy", prompt=prompt, max_tokens=16, seed=2, echo=True,
                                            logprobs=2, stream=True))
    first = chunks[0].choices[0]
    assert first.text == prompt and first.logprobs is not None and first.logprobs.tokens  # the echo has logprobs
    echoed = first.logprobs.token_logprobs  # the prompt is scored, its first token has nothing before it (issue 59)
    assert echoed[0] is None and len(echoed) > 1 and all(isinstance(v, float) for v in echoed[1:])
    tokens, offsets, tops = [], [], []
    for chunk in chunks:
        lp = chunk.choices[0].logprobs if chunk.choices else None
        if lp is not None:
            tokens += lp.tokens
            offsets += lp.text_offset
            tops += lp.top_logprobs[len(first.logprobs.tokens) if chunk is chunks[0] else 0:]
    expected, at = [], 0
    for token in tokens:  # each offset continues where the previous token ended: no restart per chunk
        expected.append(at)
        at += len(token)
    assert offsets == expected
    assert len(tops) == len(tokens) - len(first.logprobs.tokens) and all(len(t) == 2 for t in tops)
    whole = client.completions.create(model="policy", prompt=prompt, max_tokens=16, seed=2, echo=True, logprobs=2)
    lp = whole.choices[0].logprobs
    assert lp.tokens == tokens and lp.text_offset == offsets and whole.choices[0].text.startswith(prompt)


def test_a_forced_call_cut_short_by_max_tokens_is_a_200_with_finish_reason_length(client, url):
    r = client.chat.completions.create(model="policy", messages=ASK, tools=[TOOL], tool_choice="required",
                                       max_tokens=3)
    assert r.choices[0].finish_reason == "length"  # was a 422 tool_choice_not_satisfied
    named = {"type": "function", "function": {"name": "calculator"}}
    r = client.chat.completions.create(model="policy", messages=ASK, tools=[TOOL], tool_choice=named, max_tokens=2)
    assert r.choices[0].finish_reason == "length"
    messages = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0).messages.create(
        model="policy", max_tokens=3, messages=ASK, tools=[{"name": "calculator", "input_schema": TOOL["function"][
            "parameters"]}], tool_choice={"type": "any"})
    assert messages.stop_reason == "max_tokens"


def test_parallel_tool_calls_let_a_forced_turn_make_several_calls(client):
    counts = {}
    for parallel in (True, None):
        extra = {} if parallel is None else {"parallel_tool_calls": parallel}
        r = client.chat.completions.create(model="policy", messages=ASK, tools=[TOOL], tool_choice="required",
                                           max_tokens=400, n=8, seed=5, **extra)
        counts[parallel] = [len(c.message.tool_calls or []) for c in r.choices if c.finish_reason == "tool_calls"]
    assert counts[None] and set(counts[None]) == {1}  # not asked: one call, as before
    assert max(counts[True]) >= 2 and max(counts[True]) <= MAX_PARALLEL_CALLS, counts


def test_the_parallel_grammar_takes_a_second_call_only_when_asked(tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))
    call = '{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>'
    two = call + "\n<tool_call>\n" + call

    def accepts(parallel: bool, text: str) -> bool:
        from agentr1.engine import build_grammar

        spec = tool_call_grammar([TOOL], "required", "<tool_call>\n", parallel=parallel)
        matcher = xgr.GrammarMatcher(compiler.compile_grammar(build_grammar(spec)))
        if not all(matcher.accept_token(t) for t in tokenizer.encode(text, add_special_tokens=False)):
            return False
        return matcher.accept_token(tokenizer.eos_token_id)  # and the turn may end there

    assert accepts(False, call) and accepts(True, call) and accepts(True, two)
    assert not accepts(False, two)


def test_a_malformed_previous_response_id_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="policy", input="hi", previous_response_id="not-a-response")
    assert err.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="policy", input="hi", previous_response_id="resp_unknown")


def test_an_oversized_anthropic_request_is_refused_in_anthropics_shape(tiny_model_path, tmp_path):
    with serve(tmp_path / "s.db", model=str(tiny_model_path), accept_any_model=True, engine=EngineOptions(device="cpu"),
               max_body_bytes=2048) as (url, _):
        with pytest.raises(anthropic.APIStatusError) as err:
            anthropic.Anthropic(base_url=url, api_key="x", max_retries=0).messages.create(
                model="policy", max_tokens=4, messages=[{"role": "user", "content": "x" * 5000}])
        assert err.value.status_code == 413 and err.value.body["error"]["type"] == "request_too_large"
        assert json.dumps(err.value.body).startswith('{"type": "error"')
