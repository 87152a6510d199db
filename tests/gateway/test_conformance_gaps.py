"""What the official ``openai`` client sees of the three conformance gaps of issue 59, against a real gateway
(uvicorn, SQLite) on the embedded engine with a tiny random Llama (SmolLM2's tokenizer and tool template) whose
context is cut to 640 tokens: no max_tokens runs to the context limit (not 512); a forced call cut by max_tokens is a
tool call with the arguments written so far, whole and streamed; echo with logprobs scores the prompt's tokens."""

from __future__ import annotations

import json

import openai
import pytest
from gateway_harness import serve

from agentr1.core.rendering import load_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

CONTEXT = 640
TOOL = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string", "maxLength": 24}}, "required": ["expression"]}}}
ASK = [{"role": "user", "content": "what is 12*7?"}]


@pytest.fixture(scope="module")
def gateway(tiny_model_path, tmp_path_factory):
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", dtype="float32", max_context=CONTEXT),
                           model_name="policy")
    with serve(tmp_path_factory.mktemp("gaps") / "g.db", backend=backend, renderer=load_renderer(tiny_model_path),
               accept_any_model=True) as (url, store):
        yield url, store


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway[0]}/v1", api_key="x", max_retries=0)


def test_without_max_tokens_a_call_runs_to_the_context_limit_not_512(client):
    chat = client.chat.completions.create(model="policy", messages=ASK, temperature=0)  # the random model never ends
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage.completion_tokens > 512
    assert chat.usage.prompt_tokens + chat.usage.completion_tokens == CONTEXT
    text = client.completions.create(model="policy", prompt="Once upon a time", temperature=0)
    assert text.choices[0].finish_reason == "length"
    assert text.usage.prompt_tokens + text.usage.completion_tokens == CONTEXT
    with pytest.raises(openai.BadRequestError, match="maximum context length"):  # a limit asked for is still checked
        client.chat.completions.create(model="policy", messages=ASK, max_tokens=CONTEXT)


def _tool_calls(message) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


def _streamed_calls(chunks) -> tuple[str, dict[int, list[str]], set[str]]:
    """(the content, {call index: [name, arguments]}, the finish reasons) of a streamed chat completion."""
    content, calls, finish = "", {}, set()
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                name_args = calls.setdefault(call.index, ["", ""])
                name_args[0] += call.function.name or ""
                name_args[1] += call.function.arguments or ""
            if choice.finish_reason:
                finish.add(choice.finish_reason)
    return content, calls, finish


@pytest.mark.parametrize("max_tokens", [1, 14, 24], ids=["in-the-name", "before-the-arguments", "in-the-arguments"])
def test_a_forced_call_cut_by_max_tokens_is_a_tool_call_whole_and_streamed(client, gateway, tiny_model_path,
                                                                            max_tokens):
    kwargs = {"model": "policy", "messages": ASK, "tools": [TOOL], "tool_choice": "required", "seed": 4,
              "max_tokens": max_tokens}
    whole = client.chat.completions.create(**kwargs)
    choice = whole.choices[0]
    step = gateway[1].get_session(whole.agentr1["session_id"]).steps[0]  # the ids stay as sampled
    assert len(step.action_ids) == max_tokens and step.finish_reason == "length"
    written = load_renderer(tiny_model_path).tokenizer.decode(step.action_ids)
    arguments = written.split('"arguments":', 1)[1].lstrip() if '"arguments":' in written else ""
    expected = ("calculator", arguments)  # cut inside the name: the one offered function it begins
    assert choice.finish_reason == "length" and choice.message.content is None
    assert _tool_calls(choice.message) == [expected]  # was: the raw <tool_call> markup as content
    assert (max_tokens < 24) == (arguments == "")
    content, calls, finish = _streamed_calls(client.chat.completions.create(**kwargs, stream=True))
    assert content == "" and finish == {"length"}  # was: the markup as content deltas
    assert [tuple(c) for c in calls.values()] == [expected]


def test_a_named_call_cut_by_max_tokens_carries_its_partial_arguments(client):
    named = {"type": "function", "function": {"name": "calculator"}}
    r = client.chat.completions.create(model="policy", messages=ASK, tools=[TOOL], tool_choice=named, max_tokens=6,
                                       seed=4)
    ((name, arguments),) = _tool_calls(r.choices[0].message)
    assert name == "calculator" and arguments.startswith('{"expression') and r.choices[0].finish_reason == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)


CUT_REPLY = 'Let me compute that.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7 + 1'


@pytest.fixture(scope="module")
def scripted(smollm2_path, tmp_path_factory):
    from gateway_harness import serve_instant

    with serve_instant(tmp_path_factory.mktemp("cut") / "c.db", smollm2_path, CUT_REPLY) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def test_a_call_the_model_began_itself_and_max_tokens_cut_is_a_tool_call_after_its_content(scripted, smollm2_path):
    cut = len(load_renderer(smollm2_path).tokenizer.encode(CUT_REPLY, add_special_tokens=False))  # the reply, no end
    kwargs = {"model": "policy", "messages": ASK, "tools": [TOOL], "max_tokens": cut}  # tool_choice auto
    message = scripted.chat.completions.create(**kwargs).choices[0].message
    assert message.content == "Let me compute that."
    assert _tool_calls(message) == [("calculator", '{"expression": "12*7 + 1')]
    content, calls, finish = _streamed_calls(scripted.chat.completions.create(**kwargs, stream=True))
    assert content.strip() == "Let me compute that." and finish == {"length"}
    assert [tuple(c) for c in calls.values()] == [("calculator", '{"expression": "12*7 + 1')]
    offered_none = scripted.chat.completions.create(**{**kwargs, "tools": None}).choices[0].message
    assert offered_none.content == CUT_REPLY and not offered_none.tool_calls  # no tools: the markup is text


def _plain_prompt_logprobs(model_path, prompt_ids: list[int]) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt_ids])).logits[0].float(), dim=-1)
    return [float(logp[i - 1, t]) for i, t in enumerate(prompt_ids) if i > 0]


def test_echo_with_logprobs_scores_the_prompts_tokens_whole_and_streamed(client, tiny_model_path):
    prompt = "The capital of France is"
    ids = load_renderer(tiny_model_path).tokenizer.encode(prompt, add_special_tokens=False)
    whole = client.completions.create(model="policy", prompt=prompt, max_tokens=4, echo=True, logprobs=2, seed=1)
    lp = whole.choices[0].logprobs
    echoed = lp.token_logprobs[: len(ids)]
    assert echoed[0] is None and lp.top_logprobs[0] is None  # as at OpenAI: nothing comes before the first token
    assert echoed[1:] == pytest.approx(_plain_prompt_logprobs(tiny_model_path, ids), abs=1e-4)  # was: all null
    assert all(len(top) == 2 for top in lp.top_logprobs[1:])
    assert whole.choices[0].text.startswith(prompt) and lp.text_offset[: 2] == [0, len(lp.tokens[0])]
    chunks = list(client.completions.create(model="policy", prompt=prompt, max_tokens=4, echo=True, logprobs=2,
                                            seed=1, stream=True))
    first = chunks[0].choices[0]  # the echo comes first, scored
    assert first.text == prompt and first.logprobs.token_logprobs == pytest.approx(echoed, abs=1e-6)
    assert first.logprobs.top_logprobs[0] is None and first.logprobs.top_logprobs[1:] == lp.top_logprobs[1: len(ids)]
    without = client.completions.create(model="policy", prompt=prompt, max_tokens=4, echo=True, seed=1)
    assert without.choices[0].logprobs is None and without.choices[0].text.startswith(prompt)


def test_a_backend_that_cannot_score_prompts_answers_echo_with_logprobs_with_a_400(scripted):
    with pytest.raises(openai.BadRequestError) as refused:
        scripted.completions.create(model="policy", prompt="hi", max_tokens=4, echo=True, logprobs=1)
    error = refused.value.body
    assert error["param"] == "echo" and error["code"] == "unsupported_parameter" and "instant" in error["message"]
    assert scripted.completions.create(model="policy", prompt="hi", max_tokens=4, echo=True).choices[0].text
