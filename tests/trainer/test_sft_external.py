"""(b) a stronger model behind the gateway's external (LiteLLM) path: text steps, rendered once for
the policy's template at SFT-data time and marked as such. The teacher is SmolLM2-135M served by a
second, real agentr1 gateway; LiteLLM reaches it over its OpenAI endpoint; the policy is a tiny
model with its own (SmolLM2) template."""

from __future__ import annotations

import httpx
import openai
import pytest

from agentr1.core.rendering import load_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway.app import create_app
from agentr1.gateway.backends import LocalBackend
from agentr1.gateway.backends.litellm_backend import LiteLLMBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore
from agentr1.trainer.sft import SFTData, build_sft_rows, select_demonstrations


@pytest.mark.slow
def test_teacher_text_steps_are_rendered_for_the_policy_and_marked(tmp_path, smollm2_path, tiny_model_path):
    teacher = LocalBackend(smollm2_path, EngineOptions(device="cpu"), model_name="teacher")
    teacher_app = create_app(GatewaySettings(db=str(tmp_path / "teacher.db"), accept_any_model=True), backend=teacher,
                             owns_backend=True)  # closed when the gateway stops: else it holds the model for good
    db = str(tmp_path / "traces.db")
    store = TraceStore.open(db)
    with BackgroundServer(teacher_app) as teacher_url:
        external = LiteLLMBackend("openai/teacher", api_base=f"{teacher_url}/v1", api_key="x")
        recording = create_app(GatewaySettings(db=db, accept_any_model=True), store=store, backend=external)
        with BackgroundServer(recording) as url:
            made = httpx.post(f"{url}/sessions", json={"run_id": "teacher", "task_id": "greet"}).json()
            client = openai.OpenAI(base_url=made["base_url"], api_key=made["api_key"])
            messages = [{"role": "user", "content": "Say hello."}]
            for follow_up in ("Now say goodbye.", None):
                reply = client.chat.completions.create(model="teacher", messages=messages, max_tokens=12,
                                                       temperature=0)
                messages.append({"role": "assistant", "content": reply.choices[0].message.content})
                if follow_up:
                    messages.append({"role": "user", "content": follow_up})
            assert httpx.post(f"{url}/sessions/{made['id']}/finish", json={"reward": 1.0}).status_code == 200
    store.close()

    with TraceStore.open(db) as store:
        selection = select_demonstrations(store, SFTData(db=db, run_ids=["teacher"], min_reward=1.0))
    steps = selection.sessions[0].steps
    assert [s.trainable for s in steps] == [False, False] and all(s.action_ids == [] for s in steps)
    skipped = build_sft_rows(selection, SFTData(db=db))
    assert skipped.rows == [] and skipped.metrics["steps_skipped_untrainable"] == 2

    renderer = load_renderer(tiny_model_path)
    rendered = build_sft_rows(selection, SFTData(db=db, text_steps="render", layout="per_step"), renderer)
    assert rendered.rendered_from_text == [True, True] and rendered.metrics["steps_rendered_from_text"] == 2
    tokenizer = renderer.tokenizer
    for row, step in zip(rendered.rows, steps, strict=True):
        assert row.prompt_ids == renderer.render(step.messages_seen, add_generation_prompt=True)
        assert tokenizer.decode(row.response_ids) == step.action["content"] + "<|im_end|>"
        assert row.response_mask == [1] * len(row.response_ids)
        assert not row.has_old_logprobs  # a rendering has no log-probs of the policy
    manifest = rendered.write_manifest(tmp_path / "sft_data.jsonl").read_text()
    assert manifest.count('"rendered_from_text": true') == 2
