"""The local engine in a process of its own (``LocalBackend(engine_process=True)``): the same answers as
the engine in a thread (ids, log-probs, policy versions, streamed deltas), weights copied exactly,
and the backend's contract kept across the pipe: pause/resume, cancellation, close, bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
import torch

from agentr1.core.generation import BackendUnavailable, GenerateRequest, GrammarSpec, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

pytestmark = pytest.mark.slow  # each backend here spawns a process that loads torch and the model


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def pair(tiny_model_path) -> Iterator[tuple[LocalBackend, LocalBackend]]:
    thread = LocalBackend(tiny_model_path, EngineOptions(device="cpu", threads=1))
    process = LocalBackend(tiny_model_path, EngineOptions(device="cpu", threads=1), engine_process=True)
    run(thread.start())
    run(process.start())
    yield thread, process
    run(thread.close())
    run(process.close())


def requests() -> list[GenerateRequest]:
    sampled = [GenerateRequest(list(range(100, 120 + 7 * i)), SamplingParams(max_new_tokens=12, seed=i))
               for i in range(6)]
    greedy = GenerateRequest([1, 30, 31, 32, 33], SamplingParams(max_new_tokens=8, temperature=0.0, top_logprobs=3))
    return [*sampled, greedy]


async def answers(backend: LocalBackend) -> list[Any]:
    results = await asyncio.gather(*(backend.generate(r) for r in requests()))
    return [(r.output_ids, r.logprobs, r.finish_reason, r.policy_version, r.top_logprobs) for r in results]


def same_answers(ours: list[Any], theirs: list[Any]) -> None:
    """The same ids, finish reasons and versions; log-probs to float rounding (requests reach the batch
    at moments of their own, so a decode step may cover another number of rows)."""
    assert [(a[0], a[2], a[3]) for a in ours] == [(t[0], t[2], t[3]) for t in theirs]
    for a, t in zip(ours, theirs, strict=True):
        assert a[1] == pytest.approx(t[1], abs=1e-5)


def test_the_engine_process_answers_as_the_engine_thread(pair):
    thread, process = pair
    same_answers(run(answers(process)), run(answers(thread)))
    assert process.engine.model is None and process.stats.tokens_generated >= 6 * 12  # its counters come back

    async def streamed(backend: LocalBackend) -> tuple[list[int], Any]:
        ids: list[int] = []
        result = None
        async for delta in backend.stream(requests()[0]):
            ids += delta.token_ids
            result = delta.result or result
        return ids, result

    ids, result = run(streamed(process))
    assert ids == result.output_ids == run(thread.generate(requests()[0])).output_ids


def test_weights_reach_the_engine_process_exactly_with_the_policy_version(pair, tmp_path):
    thread, process = pair
    from transformers import AutoModelForCausalLM

    from agentr1.core.models import build_tiny_random_model

    plain = AutoModelForCausalLM.from_pretrained(build_tiny_random_model(tmp_path / "other", seed=1))
    new = {k: v.clone() for k, v in plain.state_dict().items()}
    before = run(process.generate(requests()[-1]))
    versions = (thread.policy_version, process.policy_version)
    assert run(thread.update_weights_from_tensors(new)) == versions[0] + 1
    assert run(process.update_weights_from_tensors(new)) == versions[1] + 1 == process.policy_version
    after = run(answers(process))
    same_answers(after, run(answers(thread)))
    assert {a[3] for a in after} == {process.policy_version}
    assert after[-1][0] != before.output_ids  # the new weights sample something else
    # a plain forward with the new weights gives the greedy answer's log-probs
    plain.load_state_dict(new)
    ids = [1, 30, 31, 32, 33, *after[-1][0]]
    with torch.no_grad():
        logits = plain(torch.tensor([ids])).logits[0, 4:-1].log_softmax(-1)
    expected = logits.gather(1, torch.tensor(after[-1][0])[:, None])[:, 0].tolist()
    assert after[-1][1] == pytest.approx(expected, abs=1e-5)

    with pytest.raises(ValueError, match="do not match"):  # checked in the child; nothing changes
        run(process.update_weights_from_tensors({"nope": torch.zeros(1)}))
    assert process.policy_version == versions[1] + 1
    same_answers(run(answers(process)), after)


def test_pause_cancel_and_bad_input_across_the_pipe(pair):
    _, process = pair

    async def scenario() -> None:
        await process.pause()
        waiting = asyncio.ensure_future(process.generate(requests()[1]))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # queued while paused
        await process.resume()
        assert (await waiting).finish_reason == "length"

        long = GenerateRequest([5, 6, 7], SamplingParams(max_new_tokens=1500, temperature=1.0, seed=3))
        stream = process.stream(long)
        first = await stream.__anext__()
        assert first.token_ids
        await stream.aclose()  # the consumer leaves: the row stops, the backend becomes idle
        await asyncio.wait_for(process.pause(), 30)
        await process.resume()

        with pytest.raises(ValueError, match="empty"):
            await process.generate(GenerateRequest([], SamplingParams()))

    run(scenario())


def test_a_grammar_is_compiled_in_the_engine_process(pair):
    _, process = pair
    pytest.importorskip("xgrammar")
    request = GenerateRequest([1, 30, 31], SamplingParams(max_new_tokens=40, temperature=0.0),
                              grammar=GrammarSpec("regex", "[0-9]{3}"))
    result = run(process.generate(request))
    text = process.engine.tokenizer.decode(result.output_ids, skip_special_tokens=True)
    assert len(text) == 3 and text.isdigit()


def test_closing_the_engine_process_aborts_rows_and_refuses_new_ones(tiny_model_path):
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", threads=1), engine_process=True)

    async def scenario() -> None:
        await backend.start()
        stream = backend.stream(GenerateRequest([5, 6, 7], SamplingParams(max_new_tokens=1500, seed=1)))
        assert (await stream.__anext__()).token_ids  # running in the child
        closing = asyncio.ensure_future(backend.close())
        rest = [delta async for delta in stream]
        assert rest[-1].result is not None and rest[-1].result.finish_reason == "abort"
        await closing
        assert not backend.engine._remote.process.is_alive()
        with pytest.raises(BackendUnavailable):
            await backend.generate(GenerateRequest([5, 6], SamplingParams(max_new_tokens=2)))

    run(scenario())
