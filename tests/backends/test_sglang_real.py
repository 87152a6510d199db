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
