"""SGLangBackend against a real SGLang server: the documented integration test (docs/backends.md).

Runs only when ``AGENTR1_SGLANG_URL`` is set (one URL, or several separated by commas), e.g.::

    python -m sglang.launch_server --model-path /models/SmolLM2-135M-Instruct --port 30000 \\
        [--skip-tokenizer-init] [--enable-deterministic-inference]
    AGENTR1_SGLANG_URL=http://127.0.0.1:30000 pytest tests/backends/test_sglang_real.py

Optional: ``AGENTR1_SGLANG_TOKENIZER`` (a local directory with the served model's tokenizer) to
encode a real prompt; ``AGENTR1_SGLANG_WEIGHTS`` (a checkpoint directory on the server's
filesystem, same architecture) to exercise the weight update.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from backend_helpers import collect, request, run, using

from agentr1.gateway.backends.sglang import SGLangBackend

URLS = [u.strip() for u in os.environ.get("AGENTR1_SGLANG_URL", "").split(",") if u.strip()]
pytestmark = pytest.mark.skipif(not URLS, reason="set AGENTR1_SGLANG_URL to a running SGLang server to run this "
                                                 "integration test (docs/backends.md)")


def _prompt() -> list[int]:
    path = os.environ.get("AGENTR1_SGLANG_TOKENIZER")
    if not path:
        return list(range(100, 116))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    return tok.encode("<|im_start|>user\nWhat is 12*7?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)


def test_generate_stream_stop_and_top_logprobs_on_a_real_server():
    prompt = _prompt()

    async def body(b: SGLangBackend):
        assert await b.ready() and b.max_context > len(prompt) and b.model_name
        first, second = await b.generate(request(prompt, max_new_tokens=16)), \
            await b.generate(request(prompt, max_new_tokens=16))
        assert first.output_ids == second.output_ids  # greedy is reproducible
        assert len(first.logprobs) == len(first.output_ids) and all(lp <= 0 for lp in first.logprobs)
        assert first.finish_reason in ("stop", "length") and first.prompt_tokens == len(prompt)
        ids, lps, streamed, deltas = await collect(b.stream(request(prompt, max_new_tokens=16)))
        assert ids == streamed.output_ids == first.output_ids and deltas >= 2
        assert lps == pytest.approx(first.logprobs, abs=5e-2)  # batch composition moves the last digits on GPUs
        stop = first.output_ids[min(2, len(first.output_ids) - 1)]
        stopped = await b.generate(request(prompt, max_new_tokens=16, stop_token_ids=[stop]))
        assert stopped.output_ids[-1] == stop and stopped.finish_reason == "stop" and stopped.matched_stop == stop
        top = await b.generate(request(prompt, max_new_tokens=4, top_logprobs=3))
        assert top.top_logprobs and all(len(t) == 3 for t in top.top_logprobs)
        for alternatives, lp in zip(top.top_logprobs, top.logprobs, strict=True):
            assert alternatives[0].logprob >= lp - 1e-3  # greedy: the sampled token is the most likely
        sampled = await asyncio.gather(*(b.generate(request(prompt, f"session:real:{i}", max_new_tokens=8,
                                                            temperature=1.0)) for i in range(4)))
        assert all(len(r.logprobs) == len(r.output_ids) > 0 for r in sampled)

    run(using(SGLangBackend(URLS), body))


@pytest.mark.skipif(not os.environ.get("AGENTR1_SGLANG_WEIGHTS"),
                    reason="set AGENTR1_SGLANG_URL and AGENTR1_SGLANG_WEIGHTS (a checkpoint directory on the server) "
                           "to test weight sync")
def test_weight_update_on_a_real_server():
    async def body(b: SGLangBackend):
        version = b.policy_version
        assert await b.update_weights(os.environ["AGENTR1_SGLANG_WEIGHTS"]) == version + 1
        result = await b.generate(request(_prompt(), max_new_tokens=4))
        assert result.policy_version == version + 1  # meta_info.weight_version, set by the update
        with pytest.raises(ValueError):
            await b.update_weights("/nonexistent/agentr1-checkpoint")
        assert b.policy_version == version + 1

    run(using(SGLangBackend(URLS), body))


@pytest.mark.skipif(not os.environ.get("AGENTR1_SGLANG_WEIGHTS"),
                    reason="set AGENTR1_SGLANG_URL and AGENTR1_SGLANG_WEIGHTS (the served checkpoint) to test the "
                           "weight sync from memory")
def test_weight_update_from_gpu_memory_on_a_real_server():
    """The served checkpoint's tensors handed over as CUDA IPC handles (``update_weights_from_tensors``): first with
    the output embedding scaled (greedy answers change), then as they are (the first greedy answer comes back)."""
    import torch

    from agentr1.engine.weights import read_safetensors

    if not torch.cuda.is_available():
        pytest.skip("the tensor sync hands over CUDA memory: run it on the server's GPU")
    tensors = {k: v.to("cuda") for k, v in read_safetensors(os.environ["AGENTR1_SGLANG_WEIGHTS"]).items()}
    head = "lm_head.weight" if "lm_head.weight" in tensors else "model.embed_tokens.weight"
    perturbed = dict(tensors)
    perturbed[head] = tensors[head].roll(1, dims=0)  # every token's logit moves to its neighbour's id

    async def body(b: SGLangBackend):
        prompt = _prompt()
        version = b.policy_version
        before = await b.generate(request(prompt, max_new_tokens=12))
        assert await b.update_weights_from_tensors(perturbed, bucket_bytes=64 << 20) == version + 1
        changed = await b.generate(request(prompt, max_new_tokens=12))
        assert changed.policy_version == version + 1 and changed.output_ids != before.output_ids
        assert await b.update_weights_from_tensors(tensors) == version + 2
        back = await b.generate(request(prompt, max_new_tokens=12))
        assert back.output_ids == before.output_ids and back.policy_version == version + 2

    run(using(SGLangBackend(URLS), body))


@pytest.mark.skipif(not os.environ.get("AGENTR1_SGLANG_TOKENIZER"),
                    reason="set AGENTR1_SGLANG_URL and AGENTR1_SGLANG_TOKENIZER (the served model's directory)")
def test_tool_calling_sessions_through_the_gateway_store_what_sglang_sampled(tmp_path):
    """The unmodified openai client, with a tool, through the gateway in front of the real server, for three turns
    (the tool's answer in between): each stored step's action ids are what SGLang samples greedily for the stored
    observation ids, and each observation extends the previous observation + action token for token."""
    import httpx
    import openai

    from agentr1.gateway.app import create_app
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import GatewaySettings
    from agentr1.store import TraceStore

    tool = {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression",
                                             "parameters": {"type": "object", "properties": {
                                                 "expression": {"type": "string"}}, "required": ["expression"]}}}
    db = str(tmp_path / "gw.db")
    store = TraceStore.open(db)
    sessions = []
    try:
        backend = SGLangBackend(URLS, tokenizer=os.environ["AGENTR1_SGLANG_TOKENIZER"])
        with BackgroundServer(create_app(GatewaySettings(db=db), store=store, backend=backend)) as gateway:
            for question in ("What is 123*47? Use the calculator.", "Compute 19+23*2 with the tool, then answer."):
                s = httpx.post(f"{gateway}/sessions", json={"task_id": question}).json()
                sessions.append(s["id"])
                client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
                messages = [{"role": "user", "content": question}]
                for turn in range(3):  # the first call must call the tool (any model can: the gateway forces it)
                    answer = client.chat.completions.create(model="policy", messages=messages, tools=[tool],
                                                            tool_choice="required" if turn == 0 else "auto",
                                                            max_tokens=96, temperature=0)
                    message = answer.choices[0].message
                    messages.append(message.model_dump(exclude_none=True))
                    if not message.tool_calls:
                        break
                    for call in message.tool_calls:
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": "5781"})
        steps = [st for sid in sessions for st in store.get_session(sid).steps]
        assert len(steps) >= 3
        for sid in sessions:
            chain = store.get_session(sid).steps
            for earlier, later in zip(chain, chain[1:], strict=False):
                prefix = earlier.observation_ids + earlier.action_ids
                assert later.observation_ids[: len(prefix)] == prefix and not later.drift

        async def resample(b: SGLangBackend):
            return [await b.generate(request(st.observation_ids, max_new_tokens=96)) for st in steps]

        again = run(using(SGLangBackend(URLS), resample))
        for step, result in zip(steps, again, strict=True):
            assert step.backend == "sglang" and step.action_ids == result.output_ids
            assert step.action_logprobs == pytest.approx(result.logprobs, abs=5e-2)
    finally:
        store.close()
