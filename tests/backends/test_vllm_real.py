"""VLLMBackend against a real vLLM server: the fake-server tests of test_vllm_backend.py and
test_gateway_remote.py, as far as a real server can be driven, plus what only a real one can show.

Runs only when ``AGENTR1_VLLM_URL`` is set (one URL, or several separated by commas), e.g.::

    VLLM_SERVER_DEV_MODE=1 vllm serve /models/SmolLM2-135M-Instruct --port 8000 \\
        --logprobs-mode processed_logprobs --enable-sleep-mode
    AGENTR1_VLLM_URL=http://127.0.0.1:8000 AGENTR1_VLLM_MODEL=/models/SmolLM2-135M-Instruct \\
        pytest tests/backends/test_vllm_real.py

(scripts/gpu/vllm_run.sh runs it on the H200.) ``AGENTR1_VLLM_MODEL``: the served model's directory, on
this machine and the server's: its tokenizer renders real prompts, the logprob check recomputes with its
weights, and the weight-sync test writes a perturbed copy of it next to the test's tmp_path and loads it.
Without it those tests skip with the reason.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import httpx
import pytest
from backend_helpers import collect, request, run, using

from agentr1.core.generation import BackendError
from agentr1.gateway.backends.vllm import VLLMBackend

URLS = [u.strip() for u in os.environ.get("AGENTR1_VLLM_URL", "").split(",") if u.strip()]
MODEL = os.environ.get("AGENTR1_VLLM_MODEL", "")
pytestmark = pytest.mark.skipif(not URLS, reason="set AGENTR1_VLLM_URL to a running vLLM server to run this "
                                                 "integration test (docs/backends.md)")
needs_model = pytest.mark.skipif(not MODEL, reason="set AGENTR1_VLLM_MODEL to the served model's directory")
QUESTION = "<|im_start|>user\nWhat is 12*7?<|im_end|>\n<|im_start|>assistant\n"


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL)


def _prompt() -> list[int]:
    if not MODEL:
        return list(range(100, 116))
    return _tokenizer().encode(QUESTION, add_special_tokens=False)


def test_generate_stream_stop_and_top_logprobs_on_a_real_server():
    prompt = _prompt()

    async def body(b: VLLMBackend):
        assert await b.ready() and b.max_context > len(prompt) and b.model_name
        first, second = await b.generate(request(prompt, max_new_tokens=16)), \
            await b.generate(request(prompt, max_new_tokens=16))
        assert first.output_ids == second.output_ids  # greedy is reproducible
        assert len(first.logprobs) == len(first.output_ids) and all(lp <= 0 for lp in first.logprobs)
        assert first.finish_reason in ("stop", "length") and first.prompt_tokens == len(prompt)
        assert first.policy_version == 0
        ids, lps, streamed, deltas = await collect(b.stream(request(prompt, max_new_tokens=16)))
        assert ids == streamed.output_ids == first.output_ids and deltas >= 2
        assert lps == pytest.approx(first.logprobs, abs=5e-2)  # batch composition moves the last digits on GPUs
        stop = first.output_ids[min(2, len(first.output_ids) - 1)]
        stopped = await b.generate(request(prompt, max_new_tokens=16, stop_token_ids=[stop]))
        assert stopped.output_ids == first.output_ids[: first.output_ids.index(stop) + 1]
        assert stopped.finish_reason == "stop" and stopped.matched_stop == stop  # vLLM's stop_reason
        _, _, streamed_stop, _ = await collect(b.stream(request(prompt, max_new_tokens=16, stop_token_ids=[stop])))
        assert (streamed_stop.output_ids, streamed_stop.matched_stop) == (stopped.output_ids, stop)
        top = await b.generate(request(prompt, max_new_tokens=4, top_logprobs=3))
        assert top.top_logprobs and all(len(t) == 3 for t in top.top_logprobs)
        for alternatives, lp in zip(top.top_logprobs, top.logprobs, strict=True):
            assert alternatives[0].logprob >= lp - 1e-3  # greedy: the sampled token is the most likely
        eos = await b.generate(request(prompt, max_new_tokens=200))
        if eos.finish_reason == "stop":  # the end-of-sequence token is in the ids; stop_reason is null
            assert eos.matched_stop == eos.output_ids[-1]
        sampled = await asyncio.gather(*(b.generate(request(prompt, f"session:real:{i}", max_new_tokens=8,
                                                            temperature=1.0)) for i in range(4)))
        assert all(len(r.logprobs) == len(r.output_ids) > 0 for r in sampled)

    run(using(VLLMBackend(URLS), body))


def test_every_field_the_backend_sends_is_accepted_and_seeds_reproduce():
    prompt = _prompt()

    async def body(b: VLLMBackend):
        # top_p, top_k, stop strings, stop ids, seed and request_id: a real server accepts them all (200)
        full = request(prompt, "session:s:1", max_new_tokens=6, temperature=0.6, top_p=0.8, top_k=7,
                       stop=["\n\n"], stop_token_ids=[2], seed=5)
        one, again = await b.generate(full), await b.generate(full)
        assert one.output_ids == again.output_ids  # a per-request generator: the same seed, the same tokens
        seeds = [await b.generate(request(prompt, max_new_tokens=12, temperature=1.0, seed=s)) for s in range(4)]
        assert len({tuple(r.output_ids) for r in seeds}) > 1
        b.extra_body = {"return_token_ids": False}  # as an older server: ids from the "token_id:<id>" tokens
        assert (await b.generate(full)).output_ids == one.output_ids

    run(using(VLLMBackend(URLS), body))


def test_errors_surface_with_the_servers_message():
    prompt = _prompt()

    async def body(b: VLLMBackend):
        with pytest.raises(BackendError, match="maximum context length") as caught:
            await b.generate(request(prompt, max_new_tokens=b.max_context))
        assert caught.value.status_code == 400
        with pytest.raises(BackendError) as overflow_stream:
            await collect(b.stream(request(prompt, max_new_tokens=b.max_context)))
        assert overflow_stream.value.status_code == 400
        with pytest.raises(BackendError) as too_many:
            await b.generate(request(prompt, top_logprobs=10**4))
        assert too_many.value.status_code == 400
        b.model_name = "not-served"
        with pytest.raises(BackendError, match="does not exist") as unknown:
            await b.generate(request(prompt))
        assert unknown.value.status_code == 502  # our configuration, not the agent's request

    run(using(VLLMBackend(URLS, backoff_s=0.01), body))


@needs_model
def test_logprobs_are_the_trainers_log_softmax_of_logits_over_temperature():
    """What the trainer recomputes from the served weights equals what vLLM reports for its own samples
    (--logprobs-mode processed_logprobs); at temperature 0.7 the raw (temperature-1) values would differ."""
    import torch
    from transformers import AutoModelForCausalLM

    prompt, temperature = _prompt(), 0.7

    async def body(b: VLLMBackend):
        return await asyncio.gather(*(b.generate(request(prompt, max_new_tokens=24, temperature=temperature, seed=s))
                                      for s in range(4)))

    results = run(using(VLLMBackend(URLS), body))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).to(device).eval()
    ours_gap, raw_gap = [], []
    for result in results:
        ids = torch.tensor([prompt + result.output_ids], device=device)
        with torch.inference_mode():
            logits = model(ids).logits[0, len(prompt) - 1: -1].float()
        target = ids[0, len(prompt):, None]
        served = torch.tensor(result.logprobs, device=device)
        ours_gap += (served - torch.log_softmax(logits / temperature, -1).gather(1, target)[:, 0]).abs().tolist()
        raw_gap += (served - torch.log_softmax(logits, -1).gather(1, target)[:, 0]).abs().tolist()
    mean_ours, mean_raw = sum(ours_gap) / len(ours_gap), sum(raw_gap) / len(raw_gap)
    print(f"|vLLM - log_softmax(logits/T)|: mean {mean_ours:.4f} max {max(ours_gap):.4f}; "
          f"|vLLM - log_softmax(logits)|: mean {mean_raw:.4f} (bf16 server, fp32 recompute, {len(ours_gap)} tokens)")
    assert mean_ours < 0.05 and max(ours_gap) < 0.5, "vLLM's logprobs are not log_softmax(logits / T)"
    assert mean_raw > 3 * mean_ours, "the server's logprobs look like temperature-1 values (raw_logprobs mode?)"


def _perturbed_copy(src: str, dst: Path) -> Path:
    """The served model with its weights changed (same architecture): greedy decoding changes."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    generator = torch.Generator().manual_seed(0)
    for path in dst.glob("*.safetensors"):
        tensors = load_file(str(path))
        tensors = {k: (v + 0.05 * torch.randn(v.shape, generator=generator).to(v.dtype) * v.float().std().to(v.dtype)
                       if v.dim() == 2 else v) for k, v in tensors.items()}
        save_file(tensors, str(path), metadata={"format": "pt"})
    return dst


@needs_model
def test_weight_reload_through_collective_rpc_and_back(tmp_path):
    prompt = _prompt()
    other = _perturbed_copy(MODEL, tmp_path / "perturbed")

    async def body(b: VLLMBackend):
        req = request(prompt, max_new_tokens=24)
        before = await b.generate(req)
        assert await b.update_weights(str(other)) == 1
        changed = await b.generate(req)
        assert changed.policy_version == 1 and changed.logprobs != before.logprobs
        b.weight_reload = "in_place"  # the served directory (now `other`) overwritten by a trainer: reload it
        assert await b.update_weights(str(other)) == 2
        assert (await b.generate(req)).output_ids == changed.output_ids
        b.weight_reload = "weights_path"
        await b.pause()  # asleep (pause_mode="sleep", --enable-sleep-mode): woken for the load, put back
        assert httpx.get(b.pool.servers[0].url + "/is_sleeping").json()["is_sleeping"] is True
        assert await b.update_weights(MODEL) == 3
        await b.resume()
        restored = await b.generate(req)
        assert restored.output_ids == before.output_ids and restored.policy_version == 3
        assert restored.logprobs == pytest.approx(before.logprobs, abs=1e-2)

    run(using(VLLMBackend(URLS), body))


def test_sleep_and_wake_as_pause_and_resume():
    prompt = _prompt()

    async def body(b: VLLMBackend):
        await b.pause()
        assert not await b.ready()
        waiting = asyncio.create_task(b.generate(request(prompt, max_new_tokens=2)))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await b.resume()
        assert (await waiting).output_ids
        assert httpx.get(b.pool.servers[0].url + "/is_sleeping").json()["is_sleeping"] is False

    run(using(VLLMBackend(URLS), body))


@needs_model
def test_openai_client_through_the_gateway_records_the_servers_steps(tmp_path):
    import openai

    from agentr1.gateway.app import create_app
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import AuthSettings, GatewaySettings
    from agentr1.store import TraceStore

    store = TraceStore.open(str(tmp_path / "gw.db"))
    backend = VLLMBackend(URLS, tokenizer=MODEL)
    app = create_app(GatewaySettings(db=str(tmp_path / "gw.db"), auth=AuthSettings(admin_key="admin")), store=store, backend=backend)
    try:
        with BackgroundServer(app) as gateway:
            s = httpx.post(f"{gateway}/sessions", json={"task_id": "t1"}).json()
            client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
            served = httpx.get(URLS[0] + "/v1/models").json()["data"][0]["id"]  # the gateway serves that name
            messages = [{"role": "user", "content": "What is 12*7?"}]
            first = client.chat.completions.create(model=served, messages=messages, max_tokens=12, temperature=0,
                                                   logprobs=True)
            messages += [first.choices[0].message.model_dump(exclude_none=True),
                         {"role": "user", "content": "Are you sure?"}]
            chunks = list(client.chat.completions.create(model=served, messages=messages, max_tokens=12,
                                                          temperature=0, stream=True))
        steps = store.get_session(s["id"]).steps
        assert [st.backend for st in steps] == ["vllm", "vllm"] and [st.policy_version for st in steps] == [0, 0]

        async def replay(b: VLLMBackend):  # the stored prompt ids, sent again, give the stored answer
            return [await b.generate(request(st.observation_ids, max_new_tokens=12)) for st in steps]

        for step, again in zip(steps, run(using(VLLMBackend(URLS), replay)), strict=True):
            assert step.action_ids == again.output_ids
            assert step.action_logprobs == pytest.approx(again.logprobs, abs=5e-2)
        assert [t.logprob for t in first.choices[0].logprobs.content] == pytest.approx(steps[0].action_logprobs,
                                                                                       abs=1e-6)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == steps[1].action["content"]
        assert steps[1].parent_index == 0 and not steps[1].drift  # the second call extended the first exactly
    finally:
        store.close()


@needs_model
def test_zz_a_missing_checkpoint_fails_the_update_and_the_served_weights_stay():
    """Last in the module: if the failed load left the server broken, the tests before it still ran."""
    prompt = _prompt()

    async def body(b: VLLMBackend):
        req = request(prompt, max_new_tokens=16)
        before = await b.generate(req)
        with pytest.raises(BackendError, match="weight update failed"):
            await b.update_weights("/nonexistent/agentr1-checkpoint")
        assert b.policy_version == 0
        after = await b.generate(req)
        assert after.output_ids == before.output_ids, "a failed reload changed the served weights"
        await b.update_weights(MODEL)  # and the server takes a good checkpoint again

    run(using(VLLMBackend(URLS), body))
