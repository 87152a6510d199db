"""Tool-call parsers per model family (issue 59): hermes tags, bare or fenced JSON naming a declared tool (as vLLM's
llama3_json), pythonic call lists, the hermes-then-JSON parser of Qwen2.5-Coder; the registry; the defaults per
family; and parsing the real Qwen2.5-Coder tokenizer's ids (the ids stay what was sampled)."""

from __future__ import annotations

import json

import pytest

from agentr1.core.rendering import (
    FoundCalls,
    get_tool_call_parser,
    load_renderer,
    parse_hermes,
    parse_text,
    register_tool_call_parser,
    use_tool_call_parser,
)
from agentr1.core.rendering.tool_parsers import TOOL_CALL_PARSERS, default_tool_call_parser, family_tool_call_parser

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
PARIS = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def _calls(parsed):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]


def _parse(name, text, tools=TOOLS):
    return parse_text(text, get_tool_call_parser(name), tools, id_seed="seed")


# -- json ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    PARIS,
    f"  {PARIS}\n",
    f"```json\n{PARIS}\n```",
    f"```\n{PARIS}\n```",
    f"```JSON\n{PARIS}```",
    f"[{PARIS}]",
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',  # double-encoded arguments
    f"<|python_tag|>{PARIS}",
])
def test_json_reads_one_call_bare_listed_or_fenced(text):
    parsed = _parse("json", text)
    assert _calls(parsed) == [("get_weather", {"city": "Paris"})]
    assert parsed.content is None and parsed.parser == "json" and parsed.invalid_tool_calls == []


def test_json_keeps_the_text_around_a_call_as_content():
    parsed = _parse("json", f"Let me look that up.\n```json\n{PARIS}\n```\nOne moment.")
    assert _calls(parsed) == [("get_weather", {"city": "Paris"})]
    assert parsed.content == "Let me look that up.\n\nOne moment."


def test_json_reads_several_calls_in_order():
    time_call = '{"name": "get_time", "arguments": {}}'
    for text in (f"{PARIS}; {time_call}", f"{PARIS}\n{time_call}", f"[{PARIS}, {time_call}]",
                 f"```json\n{PARIS}\n```\n```json\n{time_call}\n```", f"{PARIS}\n```json\n{time_call}\n```"):
        parsed = _parse("json", text)
        assert _calls(parsed) == [("get_weather", {"city": "Paris"}), ("get_time", {})], text
        assert parsed.content is None, text
        assert [c["id"] for c in parsed.tool_calls] == [c["id"] for c in _parse("json", text).tool_calls]  # seeded
        assert len({c["id"] for c in parsed.tool_calls}) == 2


@pytest.mark.parametrize("text", [
    '{"name": "send_email", "arguments": {"to": "x"}}',  # not a declared tool
    '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "rm", "arguments": {}}]',  # one undeclared
    '{"name": "get_weather", "arguments": {"city": "Par',  # cut off
    '{"name": "get_weather", "arguments": {"city": "Paris"}',  # a brace missing
    "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}",  # not JSON
    '{"name": "get_weather", "arguments": ["Paris"]}',  # arguments not an object
    '{"city": "Paris", "temperature": 21}',  # data, not a call
    '{"result": {"name": "get_weather", "arguments": {"city": "Paris"}}}',  # a call nested in data is data
    f"```python\nprint({PARIS})\n```",  # code, not a JSON fence
    "The sets {1, 2} and [3] are small.",
])
def test_json_that_is_not_a_declared_call_stays_content(text):
    parsed = _parse("json", text)
    assert parsed.tool_calls == [] and parsed.content == text and parsed.parser == "json"


def test_json_reads_nothing_when_no_tools_are_offered():
    assert _parse("json", PARIS, tools=None).tool_calls == []
    assert _parse("json", PARIS, tools=None).content == PARIS


# -- pythonic ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, calls", [
    ('[get_weather(city="Paris")]', [("get_weather", {"city": "Paris"})]),
    ("[get_weather(city='Paris'), get_time()]", [("get_weather", {"city": "Paris"}), ("get_time", {})]),
    ('[get_weather(city="Paris", days=3, hourly=True, units=None, tags=["a"], extra={"k": 1.5})]',
     [("get_weather", {"city": "Paris", "days": 3, "hourly": True, "units": None, "tags": ["a"],
                       "extra": {"k": 1.5}})]),
])
def test_pythonic_reads_a_list_of_calls(text, calls):
    parsed = _parse("pythonic", text)
    assert _calls(parsed) == calls and parsed.content is None and parsed.parser == "pythonic"


def test_pythonic_keeps_the_text_before_the_list():
    parsed = _parse("pythonic", 'I will check.\n[get_weather(city="Paris")]')
    assert _calls(parsed) == [("get_weather", {"city": "Paris"})] and parsed.content == "I will check."


@pytest.mark.parametrize("text", [
    '[send_email(to="x")]',  # undeclared
    '[get_weather("Paris")]',  # positional
    "[get_weather(city=CITY)]",  # not a literal
    '[get_weather(city="Paris"), 3]',  # not all calls
    '[get_weather(city="Paris"',  # cut off
    '[get_weather(city="Paris")] and then some',  # the list does not end the turn
    'get_weather(city="Paris")',  # not a list
    "[get_weather(**options)]",
    PARIS,
])
def test_pythonic_that_is_not_a_declared_call_list_stays_content(text):
    parsed = _parse("pythonic", text)
    assert parsed.tool_calls == [] and parsed.content == text


# -- hermes and hermes_json ----------------------------------------------------------------------


def test_hermes_reads_tags_only_and_parse_hermes_is_the_hermes_parser():
    tagged = f"<tool_call>\n{PARIS}\n</tool_call>"
    assert _calls(_parse("hermes", tagged)) == [("get_weather", {"city": "Paris"})]
    assert _parse("hermes", PARIS).tool_calls == [] and _parse("hermes", PARIS).content == PARIS
    assert parse_hermes(tagged, id_seed="seed") == _parse("hermes", tagged, tools=None)
    assert parse_hermes(tagged).parser == "hermes"


@pytest.mark.parametrize("text", [f"<tool_call>\n{PARIS}\n</tool_call>", PARIS, f"```json\n{PARIS}\n```"])
def test_hermes_json_reads_tags_or_json(text):
    parsed = _parse("hermes_json", text)
    assert _calls(parsed) == [("get_weather", {"city": "Paris"})]
    assert parsed.content is None and parsed.parser == "hermes_json"


def test_hermes_json_prefers_the_tags_and_keeps_a_broken_block_listed():
    tagged = f'{PARIS}\n<tool_call>\n{{"name": "get_time", "arguments": {{}}}}\n</tool_call>'
    assert _calls(_parse("hermes_json", tagged)) == [("get_time", {})]  # the tags are the call; the JSON is content
    broken = "<tool_call>\n{not json}\n</tool_call>"
    parsed = _parse("hermes_json", broken)
    assert parsed.tool_calls == [] and parsed.content == broken and parsed.invalid_tool_calls == [broken]


def test_reasoning_is_split_before_any_format():
    parsed = _parse("hermes_json", f"<think>Paris, so the weather tool.</think>\n{PARIS}")
    assert parsed.reasoning == "Paris, so the weather tool." and parsed.content is None
    assert _calls(parsed) == [("get_weather", {"city": "Paris"})]


# -- the registry and the defaults ---------------------------------------------------------------


def test_unknown_parser_names_fail_listing_the_valid_ones():
    with pytest.raises(ValueError, match="hermes, hermes_json, json, llama3_json, pythonic"):
        get_tool_call_parser("qwen25")
    assert get_tool_call_parser("llama3_json") is get_tool_call_parser("json")


class _Bracketed:
    """A made-up format: ``<<name|arguments JSON>>``."""

    name = "test_bracketed"
    markers = ("<<",)

    def find_calls(self, text, tool_names):
        if text.startswith("<<") and text.endswith(">>"):
            name, _, arguments = text[2:-2].partition("|")
            if name in tool_names:
                return FoundCalls("", [(name, arguments)])
        return FoundCalls(text)


def test_a_registered_parser_is_used_by_name_and_names_are_not_taken_twice(tiny_qwen_path):
    register_tool_call_parser(_Bracketed())
    try:
        with pytest.raises(ValueError, match="registered already"):
            register_tool_call_parser(_Bracketed())
        renderer = use_tool_call_parser(load_renderer(tiny_qwen_path), "test_bracketed")
        tok = renderer.tokenizer
        ids = tok.encode('<<get_weather|{"city": "Oslo"}>><|im_end|>', add_special_tokens=False)
        parsed = renderer.parse(ids, tools=TOOLS)
        assert _calls(parsed) == [("get_weather", {"city": "Oslo"})] and parsed.parser == "test_bracketed"
    finally:
        TOOL_CALL_PARSERS.pop("test_bracketed")
    with pytest.raises(TypeError):
        register_tool_call_parser(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("names, model_type, parser", [
    (["qwen2.5-coder-0.5b"], None, "hermes_json"),
    (["/models/Qwen2.5-Coder-7B-Instruct"], "qwen2", "hermes_json"),
    (["out/sft", "Qwen2.5 Coder 0.5B Instruct AWQ"], "qwen2", "hermes_json"),  # a checkpoint of the GGUF's model
    (["Qwen/Qwen2.5-7B-Instruct"], "qwen2", "hermes"),
    (["out/checkpoint"], "qwen2", "hermes_json"),  # a Qwen2 checkpoint without a name
    (["meta-llama/Llama-3.1-8B-Instruct"], "llama", "json"),
    (["/work/llama3-runs/smollm2-135m-instruct"], "llama", "hermes"),  # only the last part of a path counts
    (["smollm2"], "llama", "hermes"),
])
def test_family_defaults(names, model_type, parser):
    assert family_tool_call_parser(names, model_type) == parser


def test_the_cached_models_get_their_family_parser(tiny_qwen_path, smollm2_path):
    qwen, smollm2 = load_renderer(tiny_qwen_path), load_renderer(smollm2_path)
    assert (qwen.tool_parser.name, smollm2.tool_parser.name) == ("hermes_json", "hermes")
    assert default_tool_call_parser(qwen.tokenizer) == "hermes_json"
    assert load_renderer(tiny_qwen_path, tool_call_parser="hermes").tool_parser.name == "hermes"
    with pytest.raises(ValueError, match="parses tool calls itself"):
        use_tool_call_parser(object(), "json")


# -- ids of the real Qwen2.5-Coder tokenizer -------------------------------------------------------


def test_the_qwen_renderer_reads_bare_json_ids_of_declared_tools_only(tiny_qwen_path):
    renderer = load_renderer(tiny_qwen_path)
    ids = renderer.tokenizer.encode(f"```json\n{PARIS}\n```<|im_end|>", add_special_tokens=False)
    sampled = list(ids)
    parsed = renderer.parse(ids, tools=TOOLS, id_seed="s")
    assert _calls(parsed) == [("get_weather", {"city": "Paris"})] and parsed.finished and parsed.content is None
    assert ids == sampled  # parsing describes the ids, never changes them
    undeclared = renderer.parse(ids, tools=[TIME])
    assert undeclared.tool_calls == [] and undeclared.content == f"```json\n{PARIS}\n```"
    assert renderer.parse(ids).tool_calls == []  # no tools offered
