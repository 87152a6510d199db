"""SGLangBackend against fake SGLang servers (SGLang's HTTP protocol answered by the real local
engine): exact equality with the engine, parameter mapping, errors, routing, retries, failover,
weight sync and pause."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack, contextmanager

import fake_sglang
import pytest
from backend_helpers import collect, request, run, served, using

from agentr1.core.generation import BackendError, BackendUnavailable
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend
from agentr1.gateway.backends.sglang import SGLangBackend
from agentr1.gateway.server import BackgroundServer


@pytest.fixture(scope="module")
def servers(engine, tiny_model_path):
    """Two fake SGLang servers on the shared engine: (urls, fake states)."""
    apps = [fake_sglang.create_app(engine, model_path=tiny_model_path, served_model_name="tiny") for _ in range(2)]
    with ExitStack() as stack:
        urls = [stack.enter_context(served(app)) for app in apps]
        yield urls, [app.state.fake for app in apps]


@pytest.fixture()
def fresh(servers):
    """The module's servers with their records and fault settings cleared."""
    urls, fakes = servers
    for fake in fakes:
        fake.requests.clear(), fake.calls.clear(), fake.fail_next.clear()
    return urls, fakes


def test_greedy_generate_equals_the_local_engine(engine, prompts, fresh):
    urls, _ = fresh

    async def body(b: SGLangBackend):
        assert (b.model_name, b.max_context, b.policy_version) == ("tiny", engine.max_context, 0)
        for prompt in prompts:
            for req in (request(prompt, max_new_tokens=10, top_logprobs=3), request(prompt, max_new_tokens=4)):
                remote, local = await b.generate(req), await engine.generate(req)
                assert remote.output_ids == local.output_ids
                assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-6)
                assert (remote.finish_reason, remote.matched_stop, remote.prompt_tokens, remote.policy_version) == \
                       (local.finish_reason, local.matched_stop, local.prompt_tokens, 0)
                assert remote.top_logprobs == local.top_logprobs
        # a stop token id ends both where the engine sampled it, and is reported as matched
        free = await engine.generate(request(prompts[0], max_new_tokens=6))
        stop = free.output_ids[3]
        remote = await b.generate(request(prompts[0], max_new_tokens=6, stop_token_ids=[stop]))
        local = await engine.generate(request(prompts[0], max_new_tokens=6, stop_token_ids=[stop]))
        assert remote.output_ids == local.output_ids == free.output_ids[: free.output_ids.index(stop) + 1]
        assert (remote.finish_reason, remote.matched_stop) == ("stop", stop)

    run(using(SGLangBackend(urls), body))


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "stream-output"])
def test_stream_matches_generate(engine, prompts, tiny_model_path, incremental):
    app = fake_sglang.create_app(engine, model_path=tiny_model_path, stream_output=incremental)
    with served(app) as url:
        async def body(b: SGLangBackend):
            for req in (request(prompts[1], max_new_tokens=9), request(prompts[2], max_new_tokens=5, top_logprobs=2)):
                ids, lps, result, deltas = await collect(b.stream(req))
                local = await engine.generate(req)
                assert ids == result.output_ids == local.output_ids and deltas > 2
                assert lps == pytest.approx(local.logprobs, abs=1e-6)
                assert result.logprobs == lps and result.finish_reason == local.finish_reason
                assert result.top_logprobs == local.top_logprobs

        run(using(SGLangBackend(url), body))
    assert all(r["stream"] for r in app.state.fake.requests)


def test_sampling_params_map_to_sglang_names(engine, prompts, fresh):
    urls, fakes = fresh

    async def body(b: SGLangBackend):
        await b.generate(request(prompts[0], "session:s1:call-0", max_new_tokens=5, temperature=0.7, top_p=0.9,
                                 top_k=5, stop=["\n\n"], stop_token_ids=[2], seed=3, top_logprobs=2))
        await b.generate(request(prompts[0], max_new_tokens=5, temperature=1e-7, top_k=0))
        # seeded sampling reproduces the engine's draw: the seed reached it as sampling_seed
        req = request(prompts[2], max_new_tokens=8, temperature=0.9, seed=11)
        assert (await b.generate(req)).output_ids == (await engine.generate(req)).output_ids

    run(using(SGLangBackend(urls[:1]), body))
    first, greedy = fakes[0].requests[:2]
    assert first == {"input_ids": prompts[0], "rid": "session:s1:call-0", "stream": False, "return_logprob": True,
                     "logprob_start_len": -1, "top_logprobs_num": 2,
                     "sampling_params": {"max_new_tokens": 5, "temperature": 0.7, "top_p": 0.9, "top_k": 5,
                                         "min_p": 0.0, "repetition_penalty": 1.0, "frequency_penalty": 0.0,
                                         "presence_penalty": 0.0, "stop": ["\n\n"], "stop_token_ids": [2],
                                         "sampling_seed": 3}}
    assert greedy["sampling_params"]["temperature"] == 0.0 and greedy["sampling_params"]["top_k"] == -1
    assert "top_logprobs_num" not in greedy and greedy["rid"]  # a rid is always sent
    no_seed = SGLangBackend(urls, max_context=64, seed_param=None).payload(request([1], seed=5), stream=False)
    assert "sampling_seed" not in no_seed["sampling_params"]


def test_an_unknown_sampling_key_is_a_server_error_and_a_bad_value_a_clear_400(prompts, fresh, engine,
                                                                                 tiny_model_path):
    """SGLang 0.5.17 builds its SamplingParams (a msgspec Struct) from ``sampling_params``: an unknown key is a
    TypeError that /generate does not catch (it catches ValueError), so the answer is a plain 500, retried like
    any 500, and a stream breaks off after its 200. A bad value is verify()'s ValueError: a 400 naming it."""
    urls, fakes = fresh

    async def body(b: SGLangBackend):
        with pytest.raises(BackendError, match="500"):
            await b.generate(request(prompts[0]))
        assert len(fakes[0].requests) == 3  # retried: SGLang's answer does not say the request was bad
        with pytest.raises(BackendError):
            await collect(b.stream(request(prompts[0])))

    run(using(SGLangBackend(urls[:1], extra_sampling={"not_a_param": 1}, retries=2, backoff_s=0.01), body))

    async def bad_value(b: SGLangBackend):
        with pytest.raises(BackendError) as caught:
            await b.generate(request(prompts[0]))
        assert caught.value.status_code == 400 and "top_p must be in (0, 1]" in str(caught.value)
        with pytest.raises(BackendError) as streamed:  # after the 200 of a stream: reported in-band
            await collect(b.stream(request(prompts[0])))
        assert streamed.value.status_code == 400 and "top_p must be in (0, 1]" in str(streamed.value)

    fakes[0].requests.clear()
    run(using(SGLangBackend(urls[:1], extra_sampling={"top_p": 2.0}), bad_value))
    assert len(fakes[0].requests) == 2  # one each: a 400 is not retried
    # a server started by verl (--skip-tokenizer-init) refuses stop strings; the reason reaches the caller
    app = fake_sglang.create_app(engine, model_path=tiny_model_path, skip_tokenizer_init=True)
    with served(app) as url:
        async def stop_strings(b: SGLangBackend):
            with pytest.raises(BackendError, match="skip_tokenizer_init") as caught:
                await b.generate(request(prompts[0], stop=["\n"]))
            assert caught.value.status_code == 400
            assert (await b.generate(request(prompts[0]))).output_ids  # token ids work

        run(using(SGLangBackend(url), stop_strings))


def test_sessions_stick_to_one_server_and_spread_over_both(prompts, fresh):
    urls, fakes = fresh

    async def body(b: SGLangBackend):
        await asyncio.gather(*(b.generate(request(prompts[i % 3], f"session:s{i}:call-{turn}", max_new_tokens=2))
                               for i in range(12) for turn in range(3)))
        await asyncio.gather(*(b.generate(request(prompts[0], f"plain-{i}", max_new_tokens=2)) for i in range(8)))

    run(using(SGLangBackend(urls), body))
    owner = {}
    for index, fake in enumerate(fakes):
        for body_ in fake.requests:
            if body_["rid"].startswith("session:"):
                session = body_["rid"].split(":")[1]
                assert owner.setdefault(session, index) == index, f"{session} moved between servers"
    assert len(owner) == 12 and set(owner.values()) == {0, 1}
    # the same assignment from another gateway process (rendezvous hashing: no shared state)
    other = SGLangBackend(urls, max_context=64)
    assert all(other.pool.ranked(s)[0].url == urls[i] for s, i in owner.items())
    plain = [sum(r["rid"].startswith("plain-") for r in fake.requests) for fake in fakes]
    assert sum(plain) == 8 and min(plain) > 0  # requests without a session are balanced


def test_transient_errors_are_retried_then_give_up_with_retry_after(prompts, fresh, engine):
    urls, fakes = fresh

    async def body(b: SGLangBackend):
        fakes[0].fail_next[:] = [503, 500]
        result = await b.generate(request(prompts[0], max_new_tokens=3))
        assert result.output_ids == (await engine.generate(request(prompts[0], max_new_tokens=3))).output_ids
        assert len(fakes[0].requests) == 3
        fakes[0].fail_next[:] = [503] * 5
        with pytest.raises(BackendUnavailable) as caught:
            await b.generate(request(prompts[0], max_new_tokens=3))
        assert caught.value.retry_after and caught.value.status_code == 503
        fakes[0].fail_next[:] = [502]
        ids, _, _, _ = await collect(b.stream(request(prompts[0], max_new_tokens=3)))  # before any token: retried
        assert ids == result.output_ids

    run(using(SGLangBackend(urls[:1], retries=2, backoff_s=0.01), body))


def test_failover_when_a_server_dies_mid_run(engine, prompts, tiny_model_path):
    apps = [fake_sglang.create_app(engine, model_path=tiny_model_path) for _ in range(2)]
    servers = [BackgroundServer(app, ready_path="/health") for app in apps]
    urls = [s.start() for s in servers]
    try:
        async def body(b: SGLangBackend):
            sessions = [f"s{i}" for i in range(8)]
            victim = b.pool.ranked(sessions[0])[0]
            results = []
            for turn in range(4):
                if turn == 2:  # the server of session s0 dies between turns; every call still succeeds
                    await asyncio.to_thread(servers[urls.index(victim.url)].stop)
                results += await asyncio.gather(*(b.generate(request(prompts[0], f"session:{s}:{turn}",
                                                                     max_new_tokens=3)) for s in sessions))
            expected = (await engine.generate(request(prompts[0], max_new_tokens=3))).output_ids
            assert all(r.output_ids == expected for r in results)
            assert not victim.up and b.pool.ranked(sessions[0])[0] is not victim
            return victim.url

        dead = run(using(SGLangBackend(urls, retries=2, backoff_s=0.01), body))
        survivor = apps[1 - urls.index(dead)].state.fake
        late = [r["rid"] for r in survivor.requests if r["rid"].endswith((":2", ":3"))]
        assert len(late) >= 8  # after the death the survivor answered every session's calls
    finally:
        for server in servers:
            server.stop()


@contextmanager
def two_servers_and_new_weights(tiny_model_path, tmp_path):
    """Two fake SGLang servers, each on an engine of its own with the tiny model, other weights for them
    (``new_weights``: a tiny model of another seed) and a ``reference`` engine that serves those: (urls, apps,
    new_weights, reference). The servers stop and the engines close at the end."""
    from agentr1.core.models import build_tiny_random_model

    new_weights = build_tiny_random_model(tmp_path / "step-1", seed=1)
    engines = [LocalBackend(tiny_model_path, EngineOptions(device="cpu", threads=1)) for _ in range(2)]
    reference = LocalBackend(new_weights, EngineOptions(device="cpu", threads=1))
    for e in (*engines, reference):
        e.engine.start()
    apps = [fake_sglang.create_app(e, model_path=tiny_model_path) for e in engines]
    try:
        with ExitStack() as stack:
            yield [stack.enter_context(served(app)) for app in apps], apps, new_weights, reference
    finally:
        for e in (*engines, reference):
            run(e.close())


def test_weight_sync_pauses_updates_and_continues_every_server(prompts, tiny_model_path, tmp_path):
    with two_servers_and_new_weights(tiny_model_path, tmp_path) as (urls, apps, new_weights, reference):

        async def body(b: SGLangBackend):
            long = request(prompts[1], "session:a:0", max_new_tokens=40)
            before = await b.generate(long)
            assert before.policy_version == 0
            assert await b.update_weights(str(new_weights)) == 1 and b.policy_version == 1
            after = await b.generate(long)
            assert after.policy_version == 1  # from meta_info.weight_version
            assert after.output_ids == (await reference.generate(long)).output_ids
            with pytest.raises(ValueError, match="could not load"):  # every server refused: nothing changed
                await b.update_weights(str(tmp_path / "missing"))
            assert b.policy_version == 1 and not any(s.stale for s in b.pool.servers)
            # a request still running when the drain times out is aborted and sampled again, all new
            b.drain_timeout_s = 0.0
            running = asyncio.create_task(b.generate(long))
            while not any(app.state.fake.running for app in apps):
                await asyncio.sleep(0.005)
            assert await b.update_weights(str(tiny_model_path)) == 2
            again = await running
            assert again.policy_version == 2 and again.finish_reason == "length"
            assert again.output_ids == before.output_ids  # the original weights are back

        run(using(SGLangBackend(urls, backoff_s=0.01), body))
        for app in apps:
            names = [name for name, _ in app.state.fake.calls]
            assert names[:3] == ["pause_generation", "update_weights_from_disk", "continue_generation"]
            assert app.state.fake.calls[1][1] == {"model_path": str(new_weights), "weight_version": "1"}
            assert names.count("continue_generation") == 3 and not app.state.fake.paused


def test_weight_sync_from_tensors_in_buckets_without_a_file(prompts, tiny_model_path, tmp_path):
    """``update_weights_from_tensors``: the tensors reach every server through ``/update_weights_from_tensor`` in
    buckets (ForkingPickler payloads: shared memory on the CPU, CUDA IPC handles on a GPU), the last bucket sets the
    weight version; a partial update changes only the tensors it names; a payload a server cannot load fails the
    update on every server, which then serve nothing until an update succeeds."""
    from agentr1.engine.weights import read_safetensors

    with two_servers_and_new_weights(tiny_model_path, tmp_path) as (urls, apps, new_weights, reference):
        tensors = read_safetensors(new_weights)

        async def body(b: SGLangBackend):
            long = request(prompts[1], "session:a:0", max_new_tokens=24)
            before = await b.generate(long)
            assert await b.update_weights_from_tensors(tensors, bucket_bytes=64 << 10) == 1
            after = await b.generate(long)
            assert after.policy_version == 1
            assert after.output_ids == (await reference.generate(long)).output_ids != before.output_ids
            # a tensor of the wrong shape: the fake refuses it (a real server's answer to that was not recorded;
            # one under a name the model lacks SGLang skips, and answers success: recorded)
            name, weight = next(iter(tensors.items()))
            with pytest.raises(BackendError, match="failed on every sglang server"):
                await b.update_weights_from_tensors({name: weight[:1]})
            assert all(s.weights_unknown for s in b.pool.servers)  # part of it may have loaded: none serves
            original = read_safetensors(tiny_model_path)
            assert await b.update_weights_from_tensors(original) == 2
            assert not any(s.stale or s.weights_unknown for s in b.pool.servers)
            again = await b.generate(long)
            assert again.output_ids == before.output_ids and again.policy_version == 2
            # a partial update: the other tensors keep their weights; an unknown name is skipped, not refused
            embedding = "model.embed_tokens.weight"
            assert await b.update_weights_from_tensors({embedding: tensors[embedding]}) == 3
            assert (await b.generate(long)).output_ids != before.output_ids
            assert await b.update_weights_from_tensors({embedding: original[embedding],
                                                        "model.no_such_weight": weight}) == 4
            assert (await b.generate(long)).output_ids == before.output_ids

        run(using(SGLangBackend(urls, backoff_s=0.01), body))
        for app in apps:
            calls = app.state.fake.calls
            first = next(i for i, (name, _) in enumerate(calls) if name == "continue_generation")
            names = [name for name, _ in calls[: first + 1]]
            assert names[0] == "pause_generation" and names[-1] == "continue_generation"
            loads = [body for name, body in calls[: first + 1] if name == "update_weights_from_tensor"]
            assert len(loads) > 2  # in buckets
            assert [b.get("flush_cache") for b in loads] == [False] * (len(loads) - 1) + [True]
            assert [b.get("weight_version") for b in loads] == [None] * (len(loads) - 1) + ["1"]


def test_pause_holds_requests_until_resume(prompts, fresh):
    urls, fakes = fresh

    async def body(b: SGLangBackend):
        assert await b.ready()
        await b.pause()
        assert not await b.ready() and all(f.paused for f in fakes)
        waiting = asyncio.create_task(b.generate(request(prompts[0], max_new_tokens=2)))
        await asyncio.sleep(0.2)
        assert not waiting.done() and not any(f.requests for f in fakes)
        await b.resume()
        assert (await waiting).output_ids and await b.ready()

    run(using(SGLangBackend(urls), body))
    assert [c[0] for c in fakes[0].calls] == ["pause_generation", "continue_generation"]


def test_unreachable_servers_are_not_ready_until_a_probe_passes(prompts, fresh):
    urls, fakes = fresh

    async def body(b: SGLangBackend):
        b.pool.mark_down(b.pool.servers[0], "test")
        fakes[0].unhealthy = True
        assert not await b.ready()  # the probe failed: still down
        fakes[0].unhealthy = False
        assert await b.ready() and b.pool.servers[0].up

    run(using(SGLangBackend(urls[:1], max_context=2048, model_name="tiny"), body))
