"""Constrained decoding in the local engine: the sampler's mask (masked, renormalised log-probabilities; other
rows untouched) and xgrammar grammars driving the tiny random model to valid output."""

from __future__ import annotations

import asyncio
import json
import re

import jsonschema
import pytest
import torch
from transformers import AutoTokenizer

from agentr1.core.generation import GenerateRequest, GrammarSpec, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.engine.grammar import (
    GrammarCache,
    grammar_mask,
    to_ebnf,
    unpack_on_device,
    unpack_on_host,
)
from agentr1.engine.sampling import SamplingBatch, sample_batch, to_host
from agentr1.gateway.backends import LocalBackend

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "size": {"enum": ["S", "M", "L"]}},
          "required": ["ok", "size"]}


def _sample(logits, params, allowed=None):
    batch = SamplingBatch(params, [11 * (i + 1) for i in range(len(params))], logits.device)
    return to_host(sample_batch(logits, batch, [0] * len(params), allowed), batch)


def test_the_mask_renormalises_the_constrained_rows_and_leaves_the_others_bit_identical():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    params = [SamplingParams(temperature=0.0, top_logprobs=4), SamplingParams(temperature=0.8, top_logprobs=4),
              SamplingParams(temperature=1.3, top_k=5, top_logprobs=3)]
    mask = torch.zeros(2, 50, dtype=torch.bool)
    mask[0, [3, 7, 9]] = True
    mask[1, [1, 2, 40, 41, 42]] = True
    rows = torch.tensor([0, 2])
    free, constrained = _sample(logits, params), _sample(logits, params, (rows, mask))
    assert (constrained[1].token_id, constrained[1].logprob, constrained[1].top) == \
        (free[1].token_id, free[1].logprob, free[1].top)  # the unconstrained row pays nothing, changes nothing
    for k, row in enumerate([0, 2]):
        s, t = constrained[row], params[row].temperature or 1.0
        assert mask[k, s.token_id]
        masked = (logits[row] / t).masked_fill(~mask[k], float("-inf"))
        assert s.logprob == pytest.approx(float(torch.log_softmax(masked, -1)[s.token_id]), abs=1e-5)
        assert all(mask[k, a.token_id] for a in s.top)  # alternatives only among the allowed tokens
    assert constrained[0].token_id == int(torch.where(mask[0], logits[0], float("-inf")).argmax())
    assert len(constrained[0].top) == 3  # 4 asked, 3 allowed: no -inf entries


def test_grammar_mask_follows_the_matcher(tiny_model_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    cache = GrammarCache(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    spec = GrammarSpec("regex", "(yes|no)")
    grammar = cache.row(spec)
    assert cache.row(spec) is not grammar and cache.compilations == 1  # compiled once per spec
    logits = torch.zeros(2, len(tokenizer))
    assert grammar_mask([(0, None), (1, None)], logits) is None  # nothing constrained: no work
    index, allowed = grammar_mask([(0, None), (1, grammar)], logits)
    assert index.tolist() == [1] and allowed.shape == (1, len(tokenizer))
    texts = {tokenizer.decode([t]) for t in allowed[0].nonzero().flatten().tolist()}
    assert texts and all("yes".startswith(x) or "no".startswith(x) for x in texts)
    for t in tokenizer.encode("yes"):
        grammar.accept(t)
    _, allowed = grammar_mask([(0, grammar)], logits)
    assert allowed[0].nonzero().flatten().tolist() == [tokenizer.eos_token_id]  # complete: only the end
    assert "root ::=" in to_ebnf(GrammarSpec("json_schema", json.dumps(SCHEMA)))
    with pytest.raises(ValueError, match="regex"):
        cache.row(GrammarSpec("regex", "(unclosed"))


def test_the_tiny_model_writes_valid_output_under_each_grammar_kind(tiny_model_path):
    async def main():
        backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", threads=1))
        await backend.start()
        try:
            tok = backend.engine.tokenizer
            prompt = tok.encode("Answer:")
            specs = [GrammarSpec("json_schema", json.dumps(SCHEMA)), GrammarSpec("regex", "(red|green|blue)!"),
                     GrammarSpec("tagged_json", alternatives=(('{"name": "f", "arguments": ', json.dumps(SCHEMA),
                                                               "}</call>"),))]
            jobs = [backend.generate(GenerateRequest(prompt, SamplingParams(max_new_tokens=120, temperature=1.0,
                                                                            seed=seed), grammar=spec))
                    for spec in specs for seed in range(3)]
            results = await asyncio.gather(*jobs)
        finally:
            await backend.close()
        for i, result in enumerate(results):
            assert result.finish_reason == "stop", result
            text = tok.decode(result.output_ids, skip_special_tokens=True)
            if i < 3:
                jsonschema.validate(json.loads(text), SCHEMA)
            elif i < 6:
                assert re.fullmatch("(red|green|blue)!", text), text
            else:
                call = json.loads(text.removesuffix("</call>"))
                assert call["name"] == "f"
                jsonschema.validate(call["arguments"], SCHEMA)
            assert all(lp <= 0 for lp in result.logprobs)

    asyncio.run(main())


def test_the_host_and_device_unpacking_of_the_bitmask_agree():
    words = torch.randint(-(2**31), 2**31 - 1, (3, 5), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    host, device = unpack_on_host(words, 150), unpack_on_device(words, 150, torch.device("cpu"))
    assert host.shape == (3, 150) and torch.equal(host, device)
    for row in range(3):  # bit j of word w is token 32 w + j, the sign bit included
        for token in (0, 31, 32, 63, 149):
            assert bool(host[row, token]) == bool((int(words[row, token // 32]) >> (token % 32)) & 1)
