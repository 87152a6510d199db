"""The embedded local backend on real models: a tiny random Llama for speed, SmolLM2 in slow tests."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Coroutine
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from agentr1.core.generation import (
    BackendError,
    BackendUnavailable,
    ContextLengthExceeded,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
)
from agentr1.core.models import build_tiny_random_model
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import Backend, LocalBackend


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def gather(backend: LocalBackend, requests: list[GenerateRequest]) -> list[GenerateResult]:
    async def together() -> list[GenerateResult]:
        return await asyncio.gather(*(backend.generate(r) for r in requests))

    return run(together())


DEVICE = os.environ.get("AGENTR1_TEST_DEVICE", "cpu")  # "cuda" runs the same suite on a GPU, in float32


def started(path: Any, **options: Any) -> LocalBackend:
    backend = LocalBackend(path, EngineOptions(device=DEVICE, dtype="float32", **options))
    run(backend.start())
    return backend


# overlap: the engine queues a decode step before it reads the previous one (the default on a GPU); the
# whole suite runs with it on and off on either device
OVERLAP = pytest.mark.parametrize("overlap", [False, True], ids=["in-step", "overlap"])


@pytest.fixture(scope="module", params=[False, True], ids=["in-step", "overlap"])
def backend(tiny_model_path, request):
    b = started(tiny_model_path, max_batch_size=16, overlap=request.param)
    yield b
    run(b.close())


def prompt(backend: LocalBackend, text: str) -> list[int]:
    return backend.engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
    )


def req(ids: list[int], **sampling: Any) -> GenerateRequest:
    sampling.setdefault("max_new_tokens", 12)
    sampling.setdefault("temperature", 0.0)
    return GenerateRequest(prompt_ids=list(ids), sampling=SamplingParams(**sampling))


async def until(condition: Any, timeout: float = 10.0) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.002)

    await asyncio.wait_for(poll(), timeout)


def gen(backend: LocalBackend, ids: list[int], **sampling: Any) -> GenerateResult:
    return run(backend.generate(req(ids, **sampling)))


def recompute_logprobs(model: Any, prompt_ids: list[int], result: GenerateResult, temperature: float) -> list[float]:
    """Plain full forward pass over prompt + output: log_softmax(logits / T) at each sampled token."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + result.output_ids], device=model.device)).logits[0].float()
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / scale, dim=-1)
    return [float(logp[len(prompt_ids) - 1 + i, t]) for i, t in enumerate(result.output_ids)]


def test_is_a_backend(backend, tiny_model_path):
    assert isinstance(backend, Backend)
    assert backend.name == "local" and backend.trainable
    assert backend.model_name == tiny_model_path.name
    assert backend.max_context == 2048
    assert backend.policy_version == 0
    assert run(backend.ready())


def test_greedy_is_deterministic_and_logprobs_match_a_plain_forward(backend):
    ids = prompt(backend, "What is 12*7?")
    first, second = gen(backend, ids, max_new_tokens=16), gen(backend, ids, max_new_tokens=16)
    assert first.output_ids == second.output_ids and first.logprobs == second.logprobs
    assert len(first.output_ids) == len(first.logprobs) == 16
    assert (first.finish_reason, first.matched_stop, first.prompt_tokens) == ("length", None, len(ids))
    expected = recompute_logprobs(backend.engine.model, ids, first, 0.0)
    assert first.logprobs == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}, {"temperature": 1.3, "top_k": 40, "top_p": 0.95}],
)
def test_seeded_sampling_is_reproducible_and_logprobs_are_untruncated(backend, sampling):
    ids = prompt(backend, "Tell me a story.")
    a = gen(backend, ids, seed=11, max_new_tokens=10, **sampling)
    b = gen(backend, ids, seed=11, max_new_tokens=10, **sampling)
    c = gen(backend, ids, seed=12, max_new_tokens=10, **sampling)
    assert a.output_ids == b.output_ids and a.logprobs == b.logprobs
    assert a.output_ids != c.output_ids
    # log_softmax(logits / T) before top-k/top-p truncation, the quantity the trainer recomputes
    expected = recompute_logprobs(backend.engine.model, ids, a, sampling["temperature"])
    assert a.logprobs == pytest.approx(expected, abs=1e-4)


def test_top_logprobs(backend):
    ids = prompt(backend, "hi")
    r = gen(backend, ids, max_new_tokens=5, top_logprobs=3)
    assert r.top_logprobs is not None and len(r.top_logprobs) == 5
    for token, logprob, top in zip(r.output_ids, r.logprobs, r.top_logprobs, strict=True):
        assert len(top) == 3
        assert [t.logprob for t in top] == sorted((t.logprob for t in top), reverse=True)
        assert top[0].token_id == token and top[0].logprob == pytest.approx(logprob, abs=1e-6)  # greedy
    assert gen(backend, ids, max_new_tokens=2).top_logprobs is None


def test_stop_token_ids_and_stop_strings(backend):
    ids = prompt(backend, "Count to ten.")
    full = gen(backend, ids, max_new_tokens=20).output_ids
    k = next(i for i in range(2, len(full)) if full[i] not in full[:i])
    r = gen(backend, ids, max_new_tokens=20, stop_token_ids=[full[k]])
    assert (r.output_ids, r.finish_reason, r.matched_stop) == (full[: k + 1], "stop", full[k])
    assert len(r.logprobs) == k + 1

    decode = backend.engine.tokenizer.decode
    pieces = [decode([t]) for t in full]
    k = next(i for i in range(2, len(full)) if pieces[i].strip() and pieces[i] not in decode(full[:i]) + "\ufffd")
    stop = pieces[k]
    r = gen(backend, ids, max_new_tokens=20, stop=["never appears \u2603", stop])
    assert (r.output_ids, r.finish_reason, r.matched_stop) == (full[: k + 1], "stop", stop)
    # a stop string spanning two tokens
    pair = decode(full[k : k + 2])
    if pair not in decode(full[: k + 1]):
        r = gen(backend, ids, max_new_tokens=20, stop=[pair])
        assert r.output_ids == full[: k + 2] and r.matched_stop == pair


def test_concurrent_requests_are_batched_and_match_single_runs(backend):
    texts = [f"question number {i}: " + "why? " * (i % 5) for i in range(16)]
    requests = []
    for i, text in enumerate(texts):
        extra = {"temperature": 0.9, "seed": 100 + i} if i % 4 == 3 else {}
        requests.append(req(prompt(backend, text), max_new_tokens=4 + (i * 5) % 13, **extra))
    alone = [run(backend.generate(r)) for r in requests]
    before = dataclasses.replace(backend.stats)
    backend.stats.max_batch_rows = 0

    batched = gather(backend, requests)
    prefills = backend.stats.prefill_passes - before.prefill_passes
    forwards = backend.stats.forward_passes - before.forward_passes
    assert prefills < len(requests)
    assert forwards < sum(len(r.output_ids) for r in alone)  # alone: one forward per token
    assert backend.stats.max_batch_rows >= 8
    for one, many in zip(alone, batched, strict=True):
        assert many.output_ids == one.output_ids  # batching never changes what is sampled
        assert many.logprobs == pytest.approx(one.logprobs, abs=1e-4)
        assert many.finish_reason == one.finish_reason


def test_rows_that_finish_at_prefill_and_one_token_prompts(backend):
    requests = [req([7], max_new_tokens=1), req([7, 8], max_new_tokens=3), req([9] * 30, max_new_tokens=1)]
    alone = [run(backend.generate(r)) for r in requests]

    for one, many in zip(alone, gather(backend, requests), strict=True):
        assert many.output_ids == one.output_ids and many.finish_reason == "length"
    assert [len(r.output_ids) for r in alone] == [1, 3, 1]


def test_new_requests_join_a_running_batch(backend):
    long_req = req(prompt(backend, "a long answer please"), max_new_tokens=120)
    short_req = req(prompt(backend, "short"), max_new_tokens=4)
    long_alone, short_alone = run(backend.generate(long_req)), run(backend.generate(short_req))

    async def scenario() -> tuple[GenerateResult, GenerateResult, int]:
        first_tokens = asyncio.Event()

        async def consume() -> GenerateResult:
            seen = 0
            async for delta in backend.stream(long_req):
                seen += len(delta.token_ids)
                if seen >= 3:
                    first_tokens.set()
                if delta.result is not None:
                    return delta.result
            raise AssertionError("no result")

        long_task = asyncio.ensure_future(consume())
        await first_tokens.wait()
        short = await backend.generate(short_req)
        still_running = not long_task.done()
        return await long_task, short, still_running

    long_result, short, still_running = run(scenario())
    assert still_running  # the short request joined the running batch instead of waiting for it
    assert short.output_ids == short_alone.output_ids
    assert long_result.output_ids == long_alone.output_ids


def test_stream_deltas_concatenate_to_the_result(backend):
    ids = prompt(backend, "stream me")

    async def collect() -> list[Any]:
        return [d async for d in backend.stream(req(ids, max_new_tokens=9, temperature=1.0, seed=3))]

    deltas = run(collect())
    final = deltas[-1].result
    assert final is not None and all(d.result is None for d in deltas[:-1])
    assert len(deltas) > 1
    assert [t for d in deltas for t in d.token_ids] == final.output_ids
    assert [x for d in deltas for x in d.logprobs] == final.logprobs
    assert final.output_ids == gen(backend, ids, max_new_tokens=9, temperature=1.0, seed=3).output_ids


def test_abandoned_and_cancelled_requests_leave_the_batch(backend):
    ids = prompt(backend, "abandon")

    async def scenario() -> None:
        stream = backend.stream(req(ids, max_new_tokens=1500))
        async for _ in stream:
            break
        await stream.aclose()
        prefills = backend.stats.prefill_passes
        task = asyncio.ensure_future(backend.generate(req(ids, max_new_tokens=1500)))
        await until(lambda: backend.stats.prefill_passes > prefills)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(backend.pause(), timeout=5)  # nothing left in flight
        await backend.resume()

    run(scenario())
    assert gen(backend, ids, max_new_tokens=2).finish_reason == "length"


def test_invalid_requests_are_rejected_before_queueing(backend):
    with pytest.raises(ValueError, match="empty"):
        gen(backend, [])
    with pytest.raises(ContextLengthExceeded) as info:
        gen(backend, [5] * 2000, max_new_tokens=100)
    assert (info.value.prompt_tokens, info.value.max_new_tokens, info.value.max_context) == (2000, 100, 2048)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match="token ids"):
        gen(backend, [1, 10**6])
    with pytest.raises(ValueError, match="top_p"):
        gen(backend, [1, 2], top_p=0.0)
    with pytest.raises(ContextLengthExceeded):
        backend.stream(req([5] * 2048, max_new_tokens=1))  # raises at call time, before streaming
    assert gen(backend, [5] * 2040, max_new_tokens=8).finish_reason == "length"  # exactly fits


def test_pause_waits_for_in_flight_and_holds_new_requests(backend):
    ids = prompt(backend, "pause")

    async def scenario() -> None:
        prefills = backend.stats.prefill_passes
        in_flight = asyncio.ensure_future(backend.generate(req(ids, max_new_tokens=30)))
        await until(lambda: backend.stats.prefill_passes > prefills)
        await backend.pause()
        assert in_flight.done() and in_flight.result().finish_reason == "length"
        assert not await backend.ready()
        waiting = asyncio.ensure_future(backend.generate(req(ids, max_new_tokens=3)))
        done, _ = await asyncio.wait([waiting], timeout=0.3)
        assert not done  # held while paused, not rejected
        await backend.resume()
        assert (await asyncio.wait_for(waiting, timeout=10)).finish_reason == "length"
        assert await backend.ready()

    run(scenario())


def test_update_weights_bumps_the_version_and_changes_the_policy(tiny_model_path, tmp_path):
    other = build_tiny_random_model(tmp_path / "other", base=tiny_model_path, seed=5)
    b = started(tiny_model_path)
    try:
        ids = prompt(b, "weights")
        before = gen(b, ids)
        assert before.policy_version == 0
        assert run(b.update_weights(str(other))) == 1 == b.policy_version
        after = gen(b, ids)
        assert after.policy_version == 1 and after.output_ids != before.output_ids
        fresh = started(other)
        assert gen(fresh, ids).output_ids == after.output_ids
        run(fresh.close())
        # a single .safetensors file
        assert run(b.update_weights(str(tiny_model_path / "model.safetensors"))) == 2
        assert gen(b, ids).output_ids == before.output_ids
        # tensors without the tied output embedding
        state = {k: v.clone() for k, v in b.engine.model.state_dict().items() if k != "lm_head.weight"}
        save_file(state, str(tmp_path / "w.safetensors"))
        assert run(b.update_weights(str(tmp_path / "w.safetensors"))) == 3
        with pytest.raises(FileNotFoundError):
            run(b.update_weights(str(tmp_path / "missing")))
        save_file({"not.a.weight": torch.zeros(2)}, str(tmp_path / "bad.safetensors"))
        with pytest.raises(ValueError, match="do not match"):
            run(b.update_weights(str(tmp_path / "bad.safetensors")))
        assert b.policy_version == 3
        assert run(b.update_weights_from_tensors(b.engine.model.state_dict())) == 4
    finally:
        run(b.close())


@OVERLAP
def test_a_failing_forward_fails_only_its_batch(tiny_model_path, overlap):
    b = started(tiny_model_path, overlap=overlap)
    fail_on: dict[str, bool] = {"prefill": False, "decode": False}

    def fault(module: Any, args: Any, kwargs: Any) -> None:
        kind = "prefill" if kwargs["input_ids"].shape[1] > 1 else "decode"
        if fail_on[kind]:
            fail_on[kind] = False
            raise RuntimeError(f"injected {kind} failure")

    b.engine.model.register_forward_pre_hook(fault, with_kwargs=True)
    try:
        ids = prompt(b, "fail")
        long_alone = gen(b, ids, max_new_tokens=40)

        async def prefill_fails() -> tuple[GenerateResult, BaseException]:
            decoded = b.stats.decode_steps
            running = asyncio.ensure_future(b.generate(req(ids, max_new_tokens=40)))
            # armed once the running request decodes: an admission is counted when its (chunked) prefill starts
            await until(lambda: b.stats.prefill_passes > 1 and b.stats.decode_steps > decoded)
            fail_on["prefill"] = True
            with pytest.raises(BackendError, match="injected prefill failure") as info:
                await b.generate(req(prompt(b, "newcomer"), max_new_tokens=5))
            return await running, info.value

        survivor, error = run(prefill_fails())
        assert survivor.output_ids == long_alone.output_ids  # the running batch was untouched
        assert error.status_code == 502

        async def decode_fails() -> list[Any]:
            await b.pause()  # queue three requests, so that they run as one batch
            tasks = [asyncio.ensure_future(b.generate(req(ids, max_new_tokens=40))) for _ in range(3)]
            await asyncio.sleep(0.01)
            fail_on["decode"] = True
            await b.resume()
            return await asyncio.gather(*tasks, return_exceptions=True)

        outcomes = run(decode_fails())
        assert all(isinstance(o, BackendError) for o in outcomes)
        assert gen(b, ids, max_new_tokens=40).output_ids == long_alone.output_ids  # still serving
        assert b.stats.requests_failed == 4
    finally:
        run(b.close())


def test_not_started_and_closed(tiny_model_path):
    b = LocalBackend(tiny_model_path, EngineOptions(device=DEVICE))
    assert not run(b.ready())
    with pytest.raises(BackendUnavailable):  # not started
        gen(b, [1, 2, 3])
    run(b.start())

    async def close_while_running() -> GenerateResult:
        task = asyncio.ensure_future(b.generate(req([1, 2, 3], max_new_tokens=1000)))
        await until(lambda: b.stats.decode_steps > 2)
        await b.close()
        return await task

    aborted = run(close_while_running())
    assert aborted.finish_reason == "abort" and len(aborted.output_ids) == len(aborted.logprobs) < 1000
    assert not run(b.ready())
    with pytest.raises(BackendUnavailable) as info:
        gen(b, [1, 2, 3])
    assert info.value.status_code == 503 and info.value.retry_after


# -- SmolLM2 ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    b = started(smollm2_path, max_batch_size=8)
    yield b
    run(b.close())


@pytest.mark.slow
def test_smollm2_answers_and_stops_at_im_end(smollm2):
    ids = prompt(smollm2, "What is the capital of France? Answer in one word.")
    r = gen(smollm2, ids, max_new_tokens=48)
    assert r.finish_reason == "stop" and r.output_ids[-1] == 2 and r.matched_stop == 2
    text = smollm2.engine.tokenizer.decode(r.output_ids, skip_special_tokens=True)
    assert "Paris" in text
    # the sampled ids are what the fixed tokenizer produces for the text (no drift on re-encoding)
    assert smollm2.engine.tokenizer.encode(text, add_special_tokens=False) == r.output_ids[:-1]
    assert r.logprobs == pytest.approx(recompute_logprobs(smollm2.engine.model, ids, r, 0.0), abs=1e-4)


@pytest.mark.slow
def test_smollm2_batched_sampling_matches_logprobs(smollm2):
    requests = [
        req(prompt(smollm2, f"Compute {a}*7. Reply with the number."), max_new_tokens=16, temperature=0.8, seed=a)
        for a in range(2, 6)
    ]

    for r, result in zip(requests, gather(smollm2, requests), strict=True):
        expected = recompute_logprobs(smollm2.engine.model, r.prompt_ids, result, 0.8)
        assert result.logprobs == pytest.approx(expected, abs=1e-4)
