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
import itertools
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


def _flush() -> None:
    """Empty every server's prefix cache. SGLang 0.5.17's greedy tokens depend on it: on an H100 the same prompt
    gave "12*7 is equal to 88." with the prompt cached and "... to 8*11 ..." without (a near tie at the tenth token;
    tests/backends/fixtures/sglang/recorded/generate_greedy.json, generate_until_eos.json), so greedy answers are
    compared from the same cache state (or start the server with --enable-deterministic-inference)."""
    import httpx

    for url in URLS:
        httpx.post(url + "/flush_cache", timeout=30).raise_for_status()


async def _cold(b: SGLangBackend, req):
    _flush()
    return await b.generate(req)


def test_generate_stream_stop_and_top_logprobs_on_a_real_server():
    prompt = _prompt()

    async def body(b: SGLangBackend):
        assert await b.ready() and b.max_context > len(prompt) and b.model_name
        first, second = await _cold(b, request(prompt, max_new_tokens=16)), \
            await _cold(b, request(prompt, max_new_tokens=16))
        assert first.output_ids == second.output_ids  # greedy is reproducible from the same cache state
        assert len(first.logprobs) == len(first.output_ids) and all(lp <= 0 for lp in first.logprobs)
        assert first.finish_reason in ("stop", "length") and first.prompt_tokens == len(prompt)
        _flush()
        ids, lps, streamed, deltas = await collect(b.stream(request(prompt, max_new_tokens=16)))
        assert ids == streamed.output_ids == first.output_ids and deltas >= 2
        assert lps == pytest.approx(first.logprobs, abs=5e-2)  # batch composition moves the last digits on GPUs
        stop = first.output_ids[min(2, len(first.output_ids) - 1)]
        stopped = await _cold(b, request(prompt, max_new_tokens=16, stop_token_ids=[stop]))
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
        before = await _cold(b, request(prompt, max_new_tokens=12))  # an update flushes the cache: compare cold
        assert await b.update_weights_from_tensors(perturbed, bucket_bytes=64 << 20) == version + 1
        changed = await b.generate(request(prompt, max_new_tokens=12))
        assert changed.policy_version == version + 1 and changed.output_ids != before.output_ids
        assert await b.update_weights_from_tensors(tensors) == version + 2
        back = await b.generate(request(prompt, max_new_tokens=12))
        assert back.output_ids == before.output_ids and back.policy_version == version + 2

    run(using(SGLangBackend(URLS), body))


class _RecordingSGLang(SGLangBackend):
    """The backend, keeping every result SGLang returned (prompt ids -> output ids, logprobs) as it parsed it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sampled: list[tuple[list[int], list[int], list[float]]] = []

    def _result(self, out, meta, request):
        result = super()._result(out, meta, request)
        self.sampled.append((list(request.prompt_ids), list(result.output_ids), list(result.logprobs)))
        return result


@pytest.mark.skipif(not os.environ.get("AGENTR1_SGLANG_TOKENIZER"),
                    reason="set AGENTR1_SGLANG_URL and AGENTR1_SGLANG_TOKENIZER (the served model's directory)")
def test_tool_calling_sessions_through_the_gateway_store_what_sglang_sampled(tmp_path):
    """The unmodified openai client, with a tool, through the gateway in front of the real server, for up to three
    turns (the tool's answer in between; the first call forced, so that any model makes one): each stored step's
    action ids and logprobs are exactly what SGLang returned for the stored observation ids, and each observation
    extends the previous observation + action token for token."""
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
    backend = _RecordingSGLang(URLS, tokenizer=os.environ["AGENTR1_SGLANG_TOKENIZER"])
    try:
        settings = GatewaySettings(db=db, accept_any_model=True)
        with BackgroundServer(create_app(settings, store=store, backend=backend)) as gateway:
            for question in ("What is 123*47? Use the calculator.", "Compute 19+23*2 with the tool, then answer."):
                s = httpx.post(f"{gateway}/sessions", json={"task_id": question}).json()
                sessions.append(s["id"])
                client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
                messages = [{"role": "user", "content": question}]
                for turn in range(3):
                    answer = client.chat.completions.create(model="policy", messages=messages, tools=[tool],
                                                            tool_choice="required" if turn == 0 else "auto",
                                                            max_tokens=96, temperature=0)
                    message = answer.choices[0].message
                    messages.append(message.model_dump(exclude_none=True))
                    if not message.tool_calls:
                        break
                    for call in message.tool_calls:
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": "5781"})
        chains = [store.get_session(sid).steps for sid in sessions]
        assert all(chain and chain[0].action["tool_calls"] for chain in chains) and sum(map(len, chains)) >= 4
        sampled = {tuple(prompt): (ids, lps) for prompt, ids, lps in backend.sampled}
        for chain in chains:
            for step in chain:
                assert step.backend == "sglang"
                assert (step.action_ids, step.action_logprobs) == sampled[tuple(step.observation_ids)]
            for earlier, later in itertools.pairwise(chain):
                prefix = earlier.observation_ids + earlier.action_ids
                assert later.observation_ids[: len(prefix)] == prefix and not later.drift
    finally:
        store.close()
