"""Rendering and parsing on SmolLM2's real tokenizer: both renderers, the same expectations."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from agentr1.core.models import ensure_smollm2
from agentr1.core.rendering import (
    ChatMLRenderer,
    ChatTemplateRenderer,
    RenderError,
    canonical_message,
    create_renderer,
    load_renderer,
)

CALC = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "Weather in a city, in °C.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}
TOOLS = [CALC, WEATHER]
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(ensure_smollm2())


@pytest.fixture(scope="module")
def chatml(tokenizer):
    return ChatMLRenderer(tokenizer)


@pytest.fixture(scope="module", params=["chatml", "template"])
def renderer(request, tokenizer):
    return create_renderer(tokenizer, request.param)


def ids_of(tokenizer, text: str, *, end: bool = True) -> list[int]:
    """What the model samples for ``text`` (canonical tokenisation), closed by <|im_end|>."""
    return tokenizer.encode(text, add_special_tokens=False) + ([tokenizer.convert_tokens_to_ids("<|im_end|>")]
                                                                if end else [])


def char_ids(tokenizer, text: str) -> list[int]:
    """A non-canonical tokenisation of ``text``: one character at a time (a model may sample this)."""
    return [t for ch in text for t in tokenizer.encode(ch, add_special_tokens=False)]


# -- choosing a renderer -------------------------------------------------------------------------


def test_load_renderer_picks_chatml_for_smollm2(tokenizer):
    renderer = load_renderer(tokenizer)
    assert isinstance(renderer, ChatMLRenderer)
    assert renderer.default_system == SYSTEM
    assert isinstance(create_renderer(tokenizer, "template"), ChatTemplateRenderer)


def test_auto_falls_back_to_template_when_chatml_differs(tokenizer):
    other = AutoTokenizer.from_pretrained(ensure_smollm2())
    other.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}"
    assert isinstance(create_renderer(other), ChatTemplateRenderer)


def test_auto_uses_chatml_when_the_template_has_no_tools(tokenizer):
    other = AutoTokenizer.from_pretrained(ensure_smollm2())  # SmolLM2's original template: no tools
    other.chat_template = (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
        "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    renderer = create_renderer(other)
    assert isinstance(renderer, ChatMLRenderer) and renderer.default_system == SYSTEM
    assert "<tools>" in other.decode(renderer.render([{"role": "user", "content": "hi"}], TOOLS))


# -- rendering -----------------------------------------------------------------------------------


def test_render_without_tools_is_chatml(renderer, tokenizer):
    ids = renderer.render([{"role": "user", "content": "What is 12*7?\n\n3"}])
    assert tokenizer.decode(ids) == (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nWhat is 12*7?\n\n3"
                                     "<|im_end|>\n<|im_start|>assistant\n")
    assert ids == tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False)
    assert ids[-4:] == tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    no_prompt = renderer.render([{"role": "user", "content": "hi"}], add_generation_prompt=False)
    assert tokenizer.decode(no_prompt).endswith("hi<|im_end|>\n")


def test_render_with_tools_lists_them_in_the_system_turn(renderer, tokenizer):
    messages = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"}]
    text = tokenizer.decode(renderer.render(messages, TOOLS))
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nUse tools.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(CALC, ensure_ascii=False) + "\n" + json.dumps(WEATHER, ensure_ascii=False) in system
    assert "°C" in system  # not escaped
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in system
    assert text != tokenizer.decode(renderer.render(messages))


def test_chatml_renders_exactly_like_the_models_template(chatml, tokenizer):
    conversations = [
        ([{"role": "user", "content": "hi"}], None),
        ([{"role": "user", "content": "hi"}], TOOLS),
        ([{"role": "system", "content": "S"}, {"role": "user", "content": "a\n\n1"},
          {"role": "assistant", "content": "b 22"}, {"role": "user", "content": "c"},
          {"role": "system", "content": "late system"}], TOOLS),
        ([{"role": "user", "content": "12*7 and Paris?"},
          {"role": "assistant", "content": "Let me check.", "tool_calls": [
              {"id": "a", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "12*7"}'}},
              {"id": "b", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "tool_call_id": "a", "content": "84"},
          {"role": "tool", "tool_call_id": "b", "content": "{\"temp\": 21}"},
          {"role": "assistant", "content": "84; 21 °C."}, {"role": "user", "content": "ok"}], TOOLS),
        ([{"role": "user", "content": [{"type": "text", "text": "part 1, "}, {"type": "text", "text": "part 2"}]}],
         None),
    ]
    for messages, tools in conversations:
        for gen in (True, False):
            expected = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen)
            assert chatml.render_text(messages, tools, add_generation_prompt=gen) == expected
            assert chatml.render(messages, tools, add_generation_prompt=gen) == tokenizer.encode(
                expected, add_special_tokens=False)


def test_tool_calls_and_results_render_hermes_style(renderer, tokenizer):
    messages = [
        {"role": "user", "content": "12*7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"expression":"12*7"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "84"},
    ]
    text = tokenizer.decode(renderer.render(messages, TOOLS))
    assert text.endswith(
        '<|im_start|>assistant\n<tool_call>\n{"name": "calc", "arguments": {"expression": "12*7"}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_equivalent_serialisations_render_the_same(renderer):
    base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo", "days": 2}'}}]}]
    variants = [
        [{"role": "user", "content": [{"type": "text", "text": "x"}]}, {**base[1], "content": None}],
        [base[0], {**base[1], "tool_calls": [{"id": "zz", "type": "function", "function": {
            "name": "weather", "arguments": {"city": "Oslo", "days": 2}}}]}],
        [{"role": "developer", "content": "sys"}, *base],
    ]
    assert renderer.render(variants[0], TOOLS) == renderer.render(base, TOOLS)
    assert renderer.render(variants[1], TOOLS) == renderer.render(base, TOOLS)
    assert renderer.render(variants[2], TOOLS) == renderer.render([{"role": "system", "content": "sys"}, *base], TOOLS)


def test_non_text_content_is_refused(renderer):
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}
    with pytest.raises(RenderError):
        renderer.render([image])
    with pytest.raises(RenderError):
        renderer.render([{"role": "user", "content": "x"}], [{"type": "function"}])


# -- parsing -------------------------------------------------------------------------------------


def test_parse_plain_content(renderer, tokenizer):
    parsed = renderer.parse(ids_of(tokenizer, "12*7 is 84.\n\nDone 1 2"))
    assert parsed.content == "12*7 is 84.\n\nDone 1 2"
    assert parsed.tool_calls == [] and parsed.reasoning is None and parsed.finished
    assert parsed.to_message() == {"role": "assistant", "content": "12*7 is 84.\n\nDone 1 2"}


def test_parse_single_tool_call(renderer, tokenizer):
    text = '<tool_call>\n{"name": "calc", "arguments": {"expression": "12*7"}}\n</tool_call>'
    for ids in (ids_of(tokenizer, text), [*char_ids(tokenizer, text), tokenizer.eos_token_id]):
        parsed = renderer.parse(ids)
        assert parsed.content is None and parsed.invalid_tool_calls == []
        [call] = parsed.tool_calls
        assert call["type"] == "function" and call["id"].startswith("call_") and len(call["id"]) == 29
        assert call["function"] == {"name": "calc", "arguments": '{"expression": "12*7"}'}
        assert json.loads(call["function"]["arguments"]) == {"expression": "12*7"}


def test_parse_multiple_tool_calls_with_text(renderer, tokenizer):
    text = ('I will check both.\n<tool_call>\n{"name": "calc", "arguments": {"expression": "2+2"}}\n</tool_call>\n'
            '<tool_call>\n{"arguments": {"city": "Zürich", "days": 3}, "name": "weather"}\n</tool_call>')
    parsed = renderer.parse(ids_of(tokenizer, text))
    assert parsed.content == "I will check both."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["calc", "weather"]
    assert json.loads(parsed.tool_calls[1]["function"]["arguments"]) == {"city": "Zürich", "days": 3}
    assert len({c["id"] for c in parsed.tool_calls}) == 2
    assert parsed.to_message()["tool_calls"] == parsed.tool_calls


def test_parse_malformed_tool_call_stays_content(renderer, tokenizer):
    bad = '<tool_call>\n{"name": "calc", "arguments": {"expression": "2+2"\n</tool_call>'
    parsed = renderer.parse(ids_of(tokenizer, bad))
    assert parsed.tool_calls == [] and parsed.content == bad and parsed.invalid_tool_calls == [bad]
    no_name = '<tool_call>\n{"arguments": {}}\n</tool_call>'
    good = '<tool_call>\n{"name": "calc", "arguments": {"expression": "1"}}\n</tool_call>'
    parsed = renderer.parse(ids_of(tokenizer, no_name + "\n" + good))
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["calc"]
    assert parsed.content == no_name and parsed.invalid_tool_calls == [no_name]
    cut = renderer.parse(ids_of(tokenizer, 'Sure. <tool_call>\n{"name": "ca', end=False))  # length cut
    assert cut.tool_calls == [] and cut.content == 'Sure. <tool_call>\n{"name": "ca' and not cut.finished


def test_parse_tolerated_variants(renderer, tokenizer):
    unclosed = renderer.parse(ids_of(tokenizer, '<tool_call>\n{"name": "calc", "arguments": {"expression": "3"}}'))
    assert [c["function"]["name"] for c in unclosed.tool_calls] == ["calc"]
    encoded = renderer.parse(ids_of(tokenizer, '<tool_call>{"name": "calc", "arguments": "{\\"expression\\": \\"4\\"}"}'
                                               "</tool_call>"))
    assert json.loads(encoded.tool_calls[0]["function"]["arguments"]) == {"expression": "4"}
    params = renderer.parse(ids_of(tokenizer, '<tool_call>{"name": "calc", "parameters": {"expression": "5"}}'
                                              "</tool_call>"))
    assert json.loads(params.tool_calls[0]["function"]["arguments"]) == {"expression": "5"}


def test_parse_reasoning(renderer, tokenizer):
    parsed = renderer.parse(ids_of(tokenizer, "<think>\n12*7 = 84, since 12*7 = 70+14.\n</think>\n\nThe answer is 84."))
    assert parsed.reasoning == "12*7 = 84, since 12*7 = 70+14." and parsed.content == "The answer is 84."
    assert parsed.to_message()["reasoning_content"] == parsed.reasoning
    with_call = renderer.parse(ids_of(tokenizer, '<think>use calc</think><tool_call>{"name": "calc", "arguments": '
                                                 '{"expression": "1"}}</tool_call>'))
    assert with_call.reasoning == "use calc" and with_call.content is None and len(with_call.tool_calls) == 1
    unclosed = renderer.parse(ids_of(tokenizer, "<think>still thinking", end=False))
    assert unclosed.reasoning == "still thinking" and unclosed.content == ""
    prefilled = renderer.parse(ids_of(tokenizer, "thought</think>answer"))  # <think> was in the prompt
    assert prefilled.reasoning == "thought" and prefilled.content == "answer"
    literal = renderer.parse(ids_of(tokenizer, "Use <think> tags like <think>this</think>."))
    assert literal.reasoning is None and literal.content == "Use <think> tags like <think>this</think>."


def test_parse_stops_at_the_end_of_turn(renderer, tokenizer):
    ids = ids_of(tokenizer, "Hello 42") + tokenizer.encode("<|im_start|>user\nmore", add_special_tokens=False)
    parsed = renderer.parse(ids)
    assert parsed.content == "Hello 42" and parsed.finished
    stopped = renderer.parse(ids_of(tokenizer, "Answer: 5\nObservation", end=False))  # stop string, no <|im_end|>
    assert stopped.content == "Answer: 5\nObservation" and not stopped.finished
    assert renderer.parse([]).content == ""


def test_tool_call_ids(renderer, tokenizer):
    text = ('<tool_call>{"name": "calc", "arguments": {"expression": "1"}}</tool_call>'
            '<tool_call>{"name": "calc", "arguments": {"expression": "1"}}</tool_call>')
    ids = ids_of(tokenizer, text)
    seeded = [renderer.parse(ids, id_seed="session-1/step-3") for _ in range(2)]
    assert seeded[0].tool_calls == seeded[1].tool_calls
    assert seeded[0].tool_calls != renderer.parse(ids, id_seed="session-1/step-4").tool_calls
    random_ids = [c["id"] for _ in range(20) for c in renderer.parse(ids).tool_calls]
    assert len(set(random_ids)) == 40


def test_parse_round_trips_rendered_assistant_messages(renderer, tokenizer):
    messages = [
        {"role": "assistant", "content": "Plain 1\n\n2"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "x", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": "Köln", "days": 10}'}}]},
        {"role": "assistant", "content": "Two calls:", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "9*9"}'}},
            {"id": "y", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "8"}'}}]},
    ]
    head = renderer.render([{"role": "user", "content": "q"}], TOOLS)
    for message in messages:
        full = renderer.render([{"role": "user", "content": "q"}, message], TOOLS, add_generation_prompt=False)
        assert full[: len(head)] == head
        action = full[len(head): -1]  # the sampled part: up to and including <|im_end|>, not the "\n"
        assert action[-1] == tokenizer.eos_token_id
        assert canonical_message(renderer.parse(action).to_message()) == canonical_message(message)


# -- tool_choice ---------------------------------------------------------------------------------


def test_tool_choice_prefill(renderer, tokenizer):
    messages = [{"role": "user", "content": "Weather in Rome?"}]
    assert renderer.tool_choice_prefill(TOOLS, "auto") == "" and renderer.tool_choice_prefill(TOOLS, None) == ""
    assert renderer.tool_choice_prefill(TOOLS, "required") == "<tool_call>\n"
    named = renderer.tool_choice_prefill(TOOLS, {"type": "function", "function": {"name": "weather"}})
    assert named == '<tool_call>\n{"name": "weather", "arguments":'
    prompt = renderer.render(messages, TOOLS, prefill=named)
    assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n" + named)
    parsed = renderer.parse(ids_of(tokenizer, ' {"city": "Rome"}}\n</tool_call>'), prefill=named)
    assert parsed.tool_calls[0]["function"] == {"name": "weather", "arguments": '{"city": "Rome"}'}
    with pytest.raises(RenderError):
        renderer.tool_choice_prefill(TOOLS, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(RenderError):
        renderer.tool_choice_prefill(None, "required")
    with pytest.raises(RenderError):
        renderer.tool_choice_prefill(TOOLS, "sometimes")


# -- the `renderers` package behind our protocol -------------------------------------------------


@pytest.fixture(scope="module")
def qwen3_like():
    """SmolLM2's tokenizer with Qwen3's tags as single tokens, so ``renderers``' Qwen3Renderer runs on it."""
    import renderers
    tok = AutoTokenizer.from_pretrained(ensure_smollm2())
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"])
    tok.unk_token = None  # SmolLM2's unk is <|endoftext|>, which Qwen3Renderer needs as a real token
    return create_renderer(tok, "renderers", config=renderers.Qwen3RendererConfig())


def test_renderers_adapter_renders_and_parses(qwen3_like):
    tok = qwen3_like.tokenizer
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "12*7?"}]}]
    assert tok.decode(qwen3_like.render(messages)) == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n12*7?"
                                                       "<|im_end|>\n<|im_start|>assistant\n")
    assert "<tools>\n" + json.dumps(CALC) in tok.decode(qwen3_like.render(messages, TOOLS))
    call = '<tool_call>\n{"name": "calc", "arguments": {"expression": "12*7"}}\n</tool_call>'
    parsed = qwen3_like.parse(ids_of(tok, "Computing.\n" + call))
    assert parsed.content == "Computing." and parsed.finished
    assert parsed.tool_calls[0]["function"] == {"name": "calc", "arguments": '{"expression": "12*7"}'}
    bad = qwen3_like.parse(ids_of(tok, '<tool_call>\n{"name": "calc", "arguments": {\n</tool_call>'))
    assert bad.tool_calls == [] and bad.invalid_tool_calls and bad.invalid_tool_calls[0] in bad.content
    plain = qwen3_like.parse(ids_of(tok, "84", end=False))
    assert plain.content == "84" and not plain.finished


def test_renderers_default_renderer_misses_smollm2_tool_calls(tokenizer):
    """The evaluation verdict, kept honest: on SmolLM2 (``<tool_call>`` is five tokens) the package's
    hermes parser finds no call, where our text-level parser does."""
    import renderers
    wrapped = create_renderer(tokenizer, "renderers",
                              config=renderers.DefaultRendererConfig(tool_parser="qwen3", reasoning_parser="think"))
    text = '<tool_call>\n{"name": "calc", "arguments": {"expression": "1"}}\n</tool_call>'
    assert wrapped.parse(ids_of(tokenizer, text)).tool_calls == []
    assert len(ChatMLRenderer(tokenizer).parse(ids_of(tokenizer, text)).tool_calls) == 1
    messages = [{"role": "user", "content": "hi"}]
    assert wrapped.render(messages, TOOLS) == ChatMLRenderer(tokenizer).render(messages, TOOLS)  # rendering is right
