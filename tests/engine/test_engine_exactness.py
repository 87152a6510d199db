"""The local engine stays exact: sampled-token log-probabilities equal a plain forward pass of the
same ids, prefix reuse changes nothing that is sampled, weight sync reaches the cached state.

The checks are plain functions of a model directory and a device so that ``bench/engine_gpu_bench.py``
runs the same ones on a GPU; here they run on the CPU with the tiny random model."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
import torch

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams
from agentr1.core.models import build_tiny_random_model
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

DEVICE = os.environ.get("AGENTR1_TEST_DEVICE", "cpu")
TOLERANCE = {"cpu": 1e-4, "cuda": 2e-3}  # float32; cuda kernels sum in other orders


def start(path: Any, device: str, **options: Any) -> LocalBackend:
    backend = LocalBackend(path, EngineOptions(device=device, dtype="float32",
                                               threads=1 if device == "cpu" else None, **options))
    backend.engine.start()
    return backend


def generate_all(backend: LocalBackend, requests: list[GenerateRequest]) -> list[GenerateResult]:
    async def together() -> list[GenerateResult]:
        return await asyncio.gather(*(backend.generate(r) for r in requests))

    return asyncio.run(together())


def plain_logprobs(model: Any, prompt: list[int], result: GenerateResult, temperature: float) -> list[float]:
    """log_softmax(logits / T) of each sampled token from one full forward over prompt + output."""
    with torch.no_grad():
        ids = torch.tensor([prompt + result.output_ids], device=model.device)
        logits = model(ids).logits[0].float()
    logp = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(result.output_ids)]


def check_logprobs_match_a_plain_forward(path: Any, device: str, **engine: Any) -> None:
    backend = start(path, device, max_batch_size=16, **engine)
    try:
        tok = backend.engine.tokenizer
        settings = [dict(temperature=0.0), dict(temperature=1.0, seed=1), dict(temperature=0.7, top_p=0.9, seed=2),
                    dict(temperature=1.2, top_k=30, seed=3)]
        requests = []
        for i in range(12):
            text = f"<|im_start|>user\nquestion {i}: " + "why? " * i + "<|im_end|>\n<|im_start|>assistant\n"
            sampling = SamplingParams(max_new_tokens=10 + i, **settings[i % len(settings)])
            requests.append(GenerateRequest(prompt_ids=tok.encode(text, add_special_tokens=False), sampling=sampling))
        for request, result in zip(requests, generate_all(backend, requests), strict=True):
            expected = plain_logprobs(backend.engine.model, request.prompt_ids, result, request.sampling.temperature)
            assert result.logprobs == pytest.approx(expected, abs=TOLERANCE[device])
    finally:
        asyncio.run(backend.close())


def check_a_smaller_batch_replays_a_wider_graph(path: Any, device: str) -> None:
    """CUDA graphs: a decode step of fewer rows than a graph captured for the same attended length replays that
    graph (its extra rows padding) instead of capturing its own; what it samples still matches a plain forward."""
    backend = start(path, device, max_batch_size=16)
    try:
        tok = backend.engine.tokenizer
        prompts = [tok.encode(f"<|im_start|>user\nquestion {i}<|im_end|>\n<|im_start|>assistant\n",
                              add_special_tokens=False) for i in range(12)]
        generate_all(backend, [GenerateRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=8, temperature=0.0))
                               for p in prompts])
        captured = backend.stats.graph_captures
        assert captured >= 1 and backend.stats.graph_shapes.split()[-1].startswith("16x")
        alone = GenerateRequest(prompt_ids=prompts[3], sampling=SamplingParams(max_new_tokens=8, temperature=1.0,
                                                                               seed=5))
        (result,) = generate_all(backend, [alone])
        assert backend.stats.graph_captures == captured  # one row: the 16-row graph, no capture of its own
        assert not any(shape.startswith("1x") for shape in backend.stats.graph_shapes.split())
        expected = plain_logprobs(backend.engine.model, alone.prompt_ids, result, 1.0)
        assert result.logprobs == pytest.approx(expected, abs=TOLERANCE[device])
    finally:
        asyncio.run(backend.close())


def session_turns(backend: LocalBackend, turns: int, **sampling: Any) -> tuple[list[GenerateResult], list[int]]:
    """An agent-like session at the token level: each prompt extends the previous prompt + output."""
    tok = backend.engine.tokenizer
    prompt = tok.encode("<|im_start|>system\nYou are a careful assistant.<|im_end|>\n", add_special_tokens=False)
    results = []
    for turn in range(turns):
        prompt = prompt + tok.encode(f"<|im_start|>user\nstep {turn}: go on<|im_end|>\n<|im_start|>assistant\n",
                                     add_special_tokens=False)
        result = asyncio.run(backend.generate(GenerateRequest(
            prompt_ids=list(prompt), sampling=SamplingParams(max_new_tokens=24, seed=turn, **sampling))))
        results.append(result)
        prompt = prompt + result.output_ids
    return results, prompt


def check_prefix_reuse_is_exact(path: Any, device: str, *, bit_exact: bool, **engine: Any) -> None:
    for sampling in (dict(temperature=0.0), dict(temperature=1.0, top_p=0.95)):
        reused_backend, plain_backend = start(path, device, **engine), start(path, device, prefix_cache=False, **engine)
        try:
            reused, final = session_turns(reused_backend, 8, **sampling)
            plain, _ = session_turns(plain_backend, 8, **sampling)
            prefilled = reused_backend.stats.prefill_tokens
        finally:
            asyncio.run(reused_backend.close())
            asyncio.run(plain_backend.close())
        for a, b in zip(reused, plain, strict=True):
            assert a.output_ids == b.output_ids
            if bit_exact:
                assert a.logprobs == b.logprobs
            else:
                assert a.logprobs == pytest.approx(b.logprobs, abs=TOLERANCE[device])
        assert [r.cached_tokens for r in plain] == [0] * 8
        assert reused[0].cached_tokens == 0 and all(r.cached_tokens > 0 for r in reused[1:])
        assert prefilled == sum(r.prompt_tokens - r.cached_tokens for r in reused)
        assert prefilled <= 1.3 * len(final), (prefilled, len(final))


def sessions_together(backend: LocalBackend, sessions: int, turns: int, **sampling: Any) -> list[list[GenerateResult]]:
    """``sessions`` agent-like sessions at once, each ``turns`` calls that extend the previous prompt + output."""
    tok = backend.engine.tokenizer

    async def one(k: int) -> list[GenerateResult]:
        prompt = tok.encode(f"<|im_start|>system\nYou are agent {k} of {sessions}.<|im_end|>\n", add_special_tokens=False)
        results = []
        for turn in range(turns):
            prompt = prompt + tok.encode(f"<|im_start|>user\nstep {turn}<|im_end|>\n<|im_start|>assistant\n",
                                         add_special_tokens=False)
            result = await backend.generate(GenerateRequest(prompt_ids=list(prompt), sampling=SamplingParams(
                max_new_tokens=6 + (k + turn) % 7, seed=100 * k + turn, **sampling)))
            results.append(result)
            prompt = prompt + result.output_ids
        return results

    async def together() -> list[list[GenerateResult]]:
        return await asyncio.gather(*(one(k) for k in range(sessions)))

    return asyncio.run(together())


def check_reuse_under_slot_pressure_is_exact(path: Any, device: str) -> None:
    """More sessions than the batch holds, every slot taken by a running row or a cached prefix: prefixes move
    and trade slots so that running rows stay at the bottom; what is sampled is what a run without reuse
    samples, and the decode steps cover hardly more slots than they have rows. (Log-probabilities agree to
    float noise, not bit for bit: concurrent sessions meet in decode batches of other sizes in the two runs,
    and a matrix product's last bits depend on its row count; the engine before this check did the same.)"""
    steps: list[tuple[int, int]] = []  # (running rows, slots the step covers)
    reused_backend, plain_backend = start(path, device, max_batch_size=4), start(path, device, max_batch_size=4,
                                                                                  prefix_cache=False)
    engine = reused_backend.engine.batch
    assert engine is not None
    decode = engine._decode

    def counted() -> None:
        if engine.rows:
            steps.append((len(engine.rows), max(r.slot for r in engine.rows) + 1))
        decode()

    engine._decode = counted
    try:  # agent sessions, then a second wave of sessions that continue none of the cached prompts
        reused = sessions_together(reused_backend, 7, 4, temperature=1.0)
        plain = sessions_together(plain_backend, 7, 4, temperature=1.0)
        reused += sessions_together(reused_backend, 6, 2, temperature=0.0, top_logprobs=2)
        plain += sessions_together(plain_backend, 6, 2, temperature=0.0, top_logprobs=2)
        slots = engine.cache.slots
    finally:
        asyncio.run(reused_backend.close())
        asyncio.run(plain_backend.close())
    for session_reused, session_plain in zip(reused, plain, strict=True):
        for a, b in zip(session_reused, session_plain, strict=True):
            assert a.output_ids == b.output_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=TOLERANCE[device])
    assert slots == 8 and sum(r.cached_tokens > 0 for s in reused for r in s[1:]) >= 18  # reuse under pressure
    covered, running = sum(top for _, top in steps), sum(rows for rows, _ in steps)
    assert covered <= 1.15 * running, f"decode steps covered {covered} slots for {running} running rows"


def check_weight_sync_reaches_cached_prefixes(path: Any, other: Any, device: str) -> None:
    backend, fresh = start(path, device), start(other, device)
    try:
        tok = backend.engine.tokenizer
        prompt = tok.encode("<|im_start|>user\nSync the weights, then answer.<|im_end|>\n<|im_start|>assistant\n",
                            add_special_tokens=False)
        request = GenerateRequest(prompt_ids=prompt, sampling=SamplingParams(max_new_tokens=12, temperature=0.0))
        before = asyncio.run(backend.generate(request))
        again = asyncio.run(backend.generate(request))
        assert again.cached_tokens > 0 and again.output_ids == before.output_ids
        state = {k: v.to(backend.engine.device) for k, v in fresh.engine.model.state_dict().items()}
        assert asyncio.run(backend.update_weights_from_tensors(state)) == 1
        after = asyncio.run(backend.generate(request))
        expected = asyncio.run(fresh.generate(request))
        assert after.cached_tokens == 0  # the old policy's keys and values are gone
        assert after.policy_version == 1 and after.output_ids == expected.output_ids
        assert after.logprobs == pytest.approx(expected.logprobs, abs=TOLERANCE[device])
    finally:
        asyncio.run(backend.close())
        asyncio.run(fresh.close())


def check_compiled_decode_matches_eager(path: Any, device: str) -> None:
    """``compile=True``: the same greedy ids and log-probabilities (within the tolerance) as the eager engine
    over batches of 1, 3 and 7 rows of different prompt lengths, compiled at most twice (symbolic shapes:
    one row, which torch specialises, and any other count), and its logprobs still match a plain forward."""
    from torch._dynamo.utils import counters

    requests = [[GenerateRequest(prompt_ids=[100 + (7 * i + j * 13) % 900 for j in range(20 + 37 * i + 5 * k)],
                                 sampling=SamplingParams(max_new_tokens=12 + 3 * k, temperature=0.0))
                 for k in range(n)] for i, n in enumerate((1, 3, 7))]
    results = {}
    for compiled in (False, True):
        graphs_before = counters["stats"]["unique_graphs"]
        backend = start(path, device, compile=compiled, max_batch_size=8)
        try:
            results[compiled] = [generate_all(backend, batch) for batch in requests]
            if compiled:
                assert counters["stats"]["unique_graphs"] - graphs_before <= 2
                for batch, answers in zip(requests, results[True], strict=True):
                    for request, result in zip(batch, answers, strict=True):
                        expected = plain_logprobs(backend.engine.model, request.prompt_ids, result, 1.0)
                        assert result.logprobs == pytest.approx(expected, abs=TOLERANCE[device])
        finally:
            asyncio.run(backend.close())
    for eager, compiled in zip(results[False], results[True], strict=True):
        assert [r.output_ids for r in compiled] == [r.output_ids for r in eager]
        for a, b in zip(eager, compiled, strict=True):
            assert b.logprobs == pytest.approx(a.logprobs, abs=TOLERANCE[device])


@pytest.mark.parametrize("exact", [None, False])  # the device's default (exact on the CPU), and whole segments
def test_logprobs_match_a_plain_forward(tiny_model_path, exact):
    check_logprobs_match_a_plain_forward(tiny_model_path, DEVICE, exact=exact)


@pytest.mark.parametrize("exact", [None, False])
def test_prefix_reuse_changes_nothing_sampled_and_prefills_each_token_about_once(tiny_model_path, exact):
    check_prefix_reuse_is_exact(tiny_model_path, DEVICE, bit_exact=DEVICE == "cpu" and exact is None, exact=exact)


def test_prefixes_make_room_for_running_rows_and_change_nothing_sampled(tiny_model_path):
    check_reuse_under_slot_pressure_is_exact(tiny_model_path, DEVICE)


def test_weight_sync_drops_cached_prefixes_and_matches_a_fresh_engine(tiny_model_path, tmp_path):
    other = build_tiny_random_model(tmp_path / "other", base=tiny_model_path, seed=9)
    check_weight_sync_reaches_cached_prefixes(tiny_model_path, other, DEVICE)


@pytest.mark.slow  # inductor compiles the decode step twice (about a minute on two cores)
def test_the_compiled_decode_step_samples_what_the_eager_one_does(tiny_model_path):
    check_compiled_decode_matches_eager(tiny_model_path, DEVICE)
