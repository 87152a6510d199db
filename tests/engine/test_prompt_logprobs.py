"""The embedded engine scores a prompt's own tokens when a request asks (``GenerateRequest.prompt_logprobs``: OpenAI's
``echo`` with ``logprobs``): the values and alternatives of a plain forward over the prompt, across chunks of the
output layer, whole and streamed (before the first token), in the engine's thread and in a process of its own."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams
from agentr1.engine import EngineOptions, prompt_logprobs
from agentr1.gateway.backends import LocalBackend

LONG = 300  # past one chunk of the output layer


def _requests(tokenizer) -> list[GenerateRequest]:
    short = tokenizer.encode("The capital of France is", add_special_tokens=False)
    long_prompt = tokenizer.encode(" ".join(f"word{i}" for i in range(LONG)), add_special_tokens=False)[:LONG]
    return [GenerateRequest(short, SamplingParams(max_new_tokens=4, temperature=0.0, top_logprobs=3),
                            prompt_logprobs=True),
            GenerateRequest(long_prompt, SamplingParams(max_new_tokens=4, temperature=0.7, seed=1, top_logprobs=2),
                            prompt_logprobs=True),
            GenerateRequest(short, SamplingParams(max_new_tokens=4, temperature=0.0))]


def _expected(model, request: GenerateRequest) -> tuple[list, list]:
    with torch.no_grad():
        logits = model(torch.tensor([request.prompt_ids])).logits[0].float()
    temperature = request.sampling.temperature or 1.0
    logp = torch.log_softmax(logits / temperature, dim=-1)
    values = [None] + [float(logp[i - 1, t]) for i, t in enumerate(request.prompt_ids) if i > 0]
    tops = [[]] + [logp[i - 1].topk(request.sampling.top_logprobs).indices.tolist()
                   for i in range(1, len(request.prompt_ids))]
    return values, tops


def _check(result: GenerateResult, request: GenerateRequest, model) -> None:
    values, top_ids = _expected(model, request)
    assert len(result.prompt_logprobs) == len(request.prompt_ids) and result.prompt_logprobs[0] is None
    assert result.prompt_logprobs[1:] == pytest.approx(values[1:], abs=1e-4)
    assert result.prompt_top_logprobs[0] == []
    assert [[a.token_id for a in alts] for alts in result.prompt_top_logprobs] == top_ids


async def _streamed(backend: LocalBackend, request: GenerateRequest) -> tuple[list, GenerateResult]:
    deltas = [delta async for delta in backend.stream(request)]
    return deltas, deltas[-1].result


@pytest.mark.parametrize("process", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["engine-thread", "engine-process"])
def test_prompt_logprobs_are_a_plain_forwards_whole_and_streamed(tiny_model_path, process):
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", dtype="float32", threads=1),
                           engine_process=process)
    asyncio.run(backend.start())
    try:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
        requests = _requests(backend.engine.tokenizer)

        async def whole():
            return await asyncio.gather(*(backend.generate(r) for r in requests))

        scored, long_scored, plain = asyncio.run(whole())
        _check(scored, requests[0], model)
        _check(long_scored, requests[1], model)
        assert plain.prompt_logprobs is None and plain.prompt_top_logprobs is None  # not asked: not computed
        assert scored.output_ids == plain.output_ids  # scoring the prompt changes nothing sampled
        deltas, result = asyncio.run(_streamed(backend, requests[0]))
        assert deltas[0].prompt_logprobs == result.prompt_logprobs and not deltas[0].token_ids  # before the tokens
        _check(result, requests[0], model)
    finally:
        asyncio.run(backend.close())


def test_the_output_layer_runs_in_chunks(tiny_model_path, monkeypatch):
    """Chunks of 7 positions give what chunks of 256 do: the chunking changes which logits are held, not values."""
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", dtype="float32", threads=1))
    asyncio.run(backend.start())
    try:
        request = _requests(backend.engine.tokenizer)[1]
        whole = prompt_logprobs.prompt_logprobs(backend.engine.model, request.prompt_ids, request.sampling)
        monkeypatch.setattr(prompt_logprobs, "CHUNK", 7)
        chunked = prompt_logprobs.prompt_logprobs(backend.engine.model, request.prompt_ids, request.sampling)
        assert chunked[0] == pytest.approx(whole[0], abs=1e-6) and len(chunked[0]) == LONG
        assert [[a.token_id for a in t] for t in chunked[1]] == [[a.token_id for a in t] for t in whole[1]]
    finally:
        asyncio.run(backend.close())
