"""VLLMBackend against a fake vLLM server (vLLM's OpenAI-compatible protocol answered by the real
local engine): exact equality with the engine, parameter mapping, errors, retries, weight reload
and sleep/wake."""

from __future__ import annotations

import asyncio

import fake_vllm
import pytest
from backend_helpers import collect, request, run, served, using

from agentr1.core.generation import BackendError
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend
from agentr1.gateway.backends.vllm import VLLMBackend


@pytest.fixture(scope="module")
def server(engine, tiny_model_path):
    app = fake_vllm.create_app(engine, model_path=tiny_model_path, served_model_name="tiny")
    with served(app) as url:
        yield url, app.state.fake


@pytest.fixture()
def fresh(server):
    url, fake = server
    fake.requests.clear(), fake.calls.clear(), fake.fail_next.clear()
    return url, fake


def test_generate_and_stream_equal_the_local_engine(engine, prompts, fresh):
    url, _ = fresh

    async def body(b: VLLMBackend):
        assert (b.model_name, b.max_context, b.policy_version) == ("tiny", engine.max_context, 0)
        for prompt in prompts:
            for req in (request(prompt, max_new_tokens=10, top_logprobs=3), request(prompt, max_new_tokens=6)):
                local = await engine.generate(req)
                remote = await b.generate(req)
                ids, lps, streamed, deltas = await collect(b.stream(req))
                for result in (remote, streamed):
                    assert result.output_ids == local.output_ids
                    assert result.logprobs == pytest.approx(local.logprobs, abs=1e-6)
                    assert (result.finish_reason, result.matched_stop, result.prompt_tokens) == \
                           (local.finish_reason, local.matched_stop, local.prompt_tokens)
                    assert result.top_logprobs == local.top_logprobs
                assert ids == local.output_ids and lps == streamed.logprobs and deltas > 2
        free = await engine.generate(request(prompts[0], max_new_tokens=6))
        stop = free.output_ids[2]
        remote = await b.generate(request(prompts[0], max_new_tokens=6, stop_token_ids=[stop]))
        assert remote.output_ids == free.output_ids[: free.output_ids.index(stop) + 1]
        assert (remote.finish_reason, remote.matched_stop) == ("stop", stop)  # vLLM's stop_reason

    run(using(VLLMBackend(url), body))


def test_request_fields_and_token_ids_without_return_token_ids(engine, prompts, fresh):
    url, fake = fresh

    async def body(b: VLLMBackend):
        await b.generate(request(prompts[0], "session:s:1", max_new_tokens=4, temperature=0.6, top_p=0.8, top_k=7,
                                 stop=["\n"], stop_token_ids=[2], seed=5))
        # an older server ignores return_token_ids: the ids come from the "token_id:<id>" tokens
        b.extra_body = {"return_token_ids": False}
        req = request(prompts[2], max_new_tokens=5, temperature=0.9, seed=4)
        assert (await b.generate(req)).output_ids == (await engine.generate(req)).output_ids

    run(using(VLLMBackend(url), body))
    assert fake.requests[0] == {
        "model": "tiny", "prompt": prompts[0], "max_tokens": 4, "temperature": 0.6, "top_p": 0.8, "top_k": 7,
        "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "logprobs": 0,
        "return_tokens_as_token_ids": True, "return_token_ids": True, "stream": False, "stop": ["\n"],
        "stop_token_ids": [2], "seed": 5, "request_id": "session:s:1"}


def test_errors_surface_with_the_servers_message(prompts, fresh, engine, tiny_model_path):
    url, fake = fresh

    async def body(b: VLLMBackend):
        with pytest.raises(BackendError, match="maximum context length") as caught:
            await b.generate(request(prompts[0], max_new_tokens=engine.max_context))
        assert caught.value.status_code == 400
        fake.fail_next[:] = [503, 500]
        assert (await b.generate(request(prompts[0], max_new_tokens=2))).output_ids
        b.model_name = "not-served"
        with pytest.raises(BackendError, match="does not exist") as unknown:
            await b.generate(request(prompts[0]))
        assert unknown.value.status_code == 502  # our configuration, not the agent's request

    run(using(VLLMBackend(url, max_context=10**6, backoff_s=0.01), body))
    assert len(fake.requests) == 5  # the 400 and the 404 were not retried; the 503 and 500 were


def test_weight_reload_through_collective_rpc(prompts, tiny_model_path, tmp_path):
    from agentr1.core.models import build_tiny_random_model

    new_weights = build_tiny_random_model(tmp_path / "step-1", seed=1)
    engine, reference = (LocalBackend(p, EngineOptions(device="cpu", threads=1))
                         for p in (tiny_model_path, new_weights))
    engine.engine.start(), reference.engine.start()
    app = fake_vllm.create_app(engine, model_path=tiny_model_path)
    try:
        with served(app) as url:
            async def body(b: VLLMBackend):
                req = request(prompts[1], max_new_tokens=12)
                assert await b.update_weights(str(new_weights)) == 1
                result = await b.generate(req)
                assert result.policy_version == 1
                assert result.output_ids == (await reference.generate(req)).output_ids
                b.weight_reload = "in_place"  # the trainer overwrote the served directory: reload it
                assert await b.update_weights(str(new_weights)) == 2
                # asleep (pause_mode="sleep"): woken for the load, put back to sleep
                await b.pause()
                assert await b.update_weights(str(new_weights)) == 3
                await b.resume()
                b.weight_reload = "update_config"  # vLLM 0.25.0 fails it: the server's message, no new version
                with pytest.raises(BackendError, match="model_arch_config"):
                    await b.update_weights(str(tiny_model_path))
                assert (await b.generate(req)).output_ids == result.output_ids

            run(using(VLLMBackend(url), body))
        assert [c[1] if c[0] == "collective_rpc" else c[0] for c in app.state.fake.calls] == [
            "reload_weights", "reset_prefix_cache", "reload_weights", "reset_prefix_cache",
            "sleep", "wake_up", "reload_weights", "reset_prefix_cache", "sleep", "wake_up", "update_config"]
        no_dev = fake_vllm.create_app(engine, model_path=tiny_model_path, dev_mode=False)
        with served(no_dev) as url:
            async def refused(b: VLLMBackend):
                with pytest.raises(BackendError, match="VLLM_SERVER_DEV_MODE"):
                    await b.update_weights(str(new_weights))
                assert b.policy_version == 0

            run(using(VLLMBackend(url), refused))
    finally:
        run(engine.close()), run(reference.close())


def test_a_failed_reload_puts_the_weights_of_before_back_or_takes_the_server_out(prompts, tiny_model_path, tmp_path):
    """vLLM 0.25.0 overwrites weights while it reloads; a reload that fails leaves weights of no checkpoint
    (the fake does the same): the backend loads the last good checkpoint again, and if that fails too the
    server is never used until an update succeeds on it."""
    import shutil

    from agentr1.core.generation import BackendUnavailable
    from agentr1.core.models import build_tiny_random_model

    engine = LocalBackend(tiny_model_path, EngineOptions(device="cpu", threads=1))
    engine.engine.start()
    checkpoint = build_tiny_random_model(tmp_path / "step-1", seed=1)
    app = fake_vllm.create_app(engine, model_path=tiny_model_path)
    try:
        with served(app) as url:
            async def body(b: VLLMBackend):
                req = request(prompts[1], max_new_tokens=12)
                before = (await b.generate(req)).output_ids
                with pytest.raises(BackendError, match="weight update failed"):
                    await b.update_weights(str(tmp_path / "missing"))
                assert b.policy_version == 0 and (await b.generate(req)).output_ids == before  # restored
                assert await b.update_weights(str(checkpoint)) == 1
                trained = (await b.generate(req)).output_ids
                shutil.rmtree(checkpoint)  # nothing to go back to
                with pytest.raises(BackendError, match="weight update failed"):
                    await b.update_weights(str(tmp_path / "missing"))
                with pytest.raises(BackendUnavailable, match="holds known weights"):
                    await b.generate(req)
                assert await b.update_weights(str(tiny_model_path)) == 2  # back in rotation
                assert (await b.generate(req)).output_ids == before != trained

            run(using(VLLMBackend(url), body))
        rpcs = [c[1] for c in app.state.fake.calls if c[0] == "collective_rpc"]
        assert rpcs == ["reload_weights"] * 6, rpcs  # failed, restore, load, failed, restore failed, load
    finally:
        run(engine.close())


def test_sleep_and_wake_as_pause_and_resume(prompts, fresh):
    url, fake = fresh

    async def body(b: VLLMBackend):
        await b.pause()
        assert fake.sleeping and not await b.ready()
        waiting = asyncio.create_task(b.generate(request(prompts[0], max_new_tokens=2)))
        await asyncio.sleep(0.2)
        assert not waiting.done() and not fake.requests
        await b.resume()
        assert (await waiting).output_ids and not fake.sleeping

    run(using(VLLMBackend(url), body))
    assert fake.calls == [("sleep", 1), ("wake_up", None)]
