"""Constraints reach remote servers in their native fields: SGLang ``sampling_params`` (json_schema, regex, ebnf),
vLLM ``structured_outputs`` (json, json_object, regex, grammar); forced tool calls as xgrammar EBNF that parses."""

from __future__ import annotations

import json

import xgrammar as xgr

from agentr1.core.generation import GenerateRequest, GrammarSpec, SamplingParams
from agentr1.gateway.backends.sglang import SGLangBackend
from agentr1.gateway.backends.vllm import VLLMBackend

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
CALL = GrammarSpec("tagged_json", alternatives=(('{"name": "f", "arguments": ', json.dumps(SCHEMA), "}\n</tool_call>"),))


def _request(grammar):
    return GenerateRequest([1, 2, 3], SamplingParams(max_new_tokens=8), grammar=grammar)


def test_sglang_sampling_params_carry_the_constraint():
    b = SGLangBackend("http://127.0.0.1:1", model_name="m", max_context=64)
    def sp(grammar):
        return b.payload(_request(grammar), stream=False)["sampling_params"]
    assert "json_schema" not in sp(None) and "ebnf" not in sp(None)
    assert json.loads(sp(GrammarSpec("json_schema", json.dumps(SCHEMA)))["json_schema"]) == SCHEMA
    assert json.loads(sp(GrammarSpec("json_object"))["json_schema"]) == {"type": "object"}
    assert sp(GrammarSpec("regex", "a+"))["regex"] == "a+"
    ebnf = sp(CALL)["ebnf"]
    assert xgr.Grammar.from_ebnf(ebnf) is not None and '\\"name\\": \\"f\\"' in ebnf


def test_vllm_structured_outputs_carry_the_constraint():
    b = VLLMBackend("http://127.0.0.1:1", model_name="m", max_context=64)
    def so(grammar):
        return b.payload(_request(grammar), stream=False).get("structured_outputs")
    assert so(None) is None
    assert so(GrammarSpec("json_schema", json.dumps(SCHEMA))) == {"json": SCHEMA}
    assert so(GrammarSpec("json_object")) == {"json_object": True}
    assert so(GrammarSpec("regex", "a+")) == {"regex": "a+"}
    assert xgr.Grammar.from_ebnf(so(CALL)["grammar"]) is not None
