"""One `agentr1 train` step on the tiny random Idefics3 with image rows, on CPU: sessions whose prompts carry
images (actions sampled by transformers' generate with the pixel values, log-probs from the same model), stored as
the gateway stores them, trained offline by the real CLI; the update reaches the vision encoder."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from agentr1.core.rendering import load_vision_renderer
from agentr1.store import StepRecord, TraceStore

AGENTR1 = str(Path(sys.executable).parent / "agentr1")


def png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def collect(db: Path, model_path: Path, groups: int = 2, samples: int = 2) -> str:
    """Sessions of one user turn with an image each, actions sampled by the model itself (with the pixels)."""
    from transformers import AutoModelForImageTextToText

    renderer = load_vision_renderer(model_path)
    model = AutoModelForImageTextToText.from_pretrained(model_path, attn_implementation="sdpa").eval()
    store = TraceStore.open(f"sqlite:///{db}")
    run = store.create_run("collected")
    torch.manual_seed(0)
    for g in range(groups):
        data = png((60 * g, 200, 30), (40 + 20 * g, 24))
        messages = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{base64.b64encode(data).decode()}"}},
            {"type": "text", "text": "What colour is it?"}]}]
        prompt = renderer.render(messages)
        pixels = renderer.multimodal(messages).tensors
        for k in range(samples):
            ids = torch.tensor([prompt])
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **pixels, do_sample=True,
                                     max_new_tokens=6, top_k=0, top_p=1.0)
                action = out[0, len(prompt):].tolist()
                logp = torch.log_softmax(model(input_ids=out, **pixels).logits[0].float(), -1)
            logprobs = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(action)]
            sid = store.create_session(run_id=run, task_id=f"t{g}", group_id=f"g{g}")
            store.append_steps([StepRecord(session_id=sid, index=0, observation_ids=prompt, action_ids=action,
                                           action_logprobs=logprobs, messages_sent=messages, messages_seen=messages,
                                           finish_reason="length")])
            store.add_reward(sid, float(k))  # one good, one bad sample per group: non-zero GRPO advantages
            store.finish_session(sid, status="finished")
    store.close()
    return run


@pytest.mark.timeout(900)
def test_agentr1_train_one_step_on_image_rows(tmp_path: Path, tiny_vlm_path: Path) -> None:
    collected = tmp_path / "collected.db"
    run = collect(collected, tiny_vlm_path)
    assert any((tmp_path / "collected.db.images").rglob("*")), "images stored beside the collecting database"
    out = tmp_path / "out"
    config = {
        "run_name": "vlm", "db": f"sqlite:///{tmp_path / 'trainer.db'}",
        "offline": {"db": f"sqlite:///{collected}", "run_id": run},
        "data": {"train_batch_size": 2},
        "algorithm": {"adv_estimator": "grpo"},
        "actor_rollout_ref": {"model": str(tiny_vlm_path), "actor": {"optim": {"lr": 1e-2}}},
        "trainer": {"total_training_steps": 1, "default_local_dir": str(out), "device": "cpu"},
    }
    (tmp_path / "job.yaml").write_text(json.dumps(config))
    proc = subprocess.run([AGENTR1, "train", str(tmp_path / "job.yaml"), "--quiet"], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (history,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert history["offline/sessions"] == 4 and history["actor/optimizer_steps"] >= 1
    # recorded log-probs were computed with the pixels: the trainer's recomputation agrees (no image dropped)
    assert history["rollout_corr/log_ppl_abs_diff"] < 1e-4, {k: v for k, v in history.items() if "corr" in k}
    before = load_file(str(tiny_vlm_path / "model.safetensors"))
    (saved,) = list(out.rglob("hf/model.safetensors"))
    after = load_file(str(saved))
    vision = [k for k in before if "vision_model" in k]
    assert vision and any(not torch.equal(before[k], after[k]) for k in vision), "the vision encoder did not train"


@pytest.mark.timeout(900)
def test_online_rollouts_with_images_train_and_serve_the_update(tmp_path: Path, tiny_vlm_path: Path) -> None:
    """`agentr1 train` with an agent that sends images: rollouts through the embedded gateway on the local engine
    (pixels in generation), one update, weights synced to the engine; step 2's rollouts are served by it."""
    out = tmp_path / "out"
    config = {
        "run_name": "vlm-online", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "multimodal_agent:solve", "timeout_s": 300},
        "data": {"generator": "multimodal_agent:make_tasks", "train_size": 4, "val_size": 1, "train_batch_size": 2},
        "reward": {"functions": ["e2e_agent:token_reward"]},
        "algorithm": {"adv_estimator": "grpo", "layout": "merged"},
        "actor_rollout_ref": {"model": str(tiny_vlm_path), "rollout": {"n": 2, "max_concurrency": 4},
                              "actor": {"optim": {"lr": 1e-2}}},
        "trainer": {"total_training_steps": 2, "default_local_dir": str(out), "device": "cpu"},
    }
    (tmp_path / "job.yaml").write_text(json.dumps(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([AGENTR1, "train", str(tmp_path / "job.yaml"), "--quiet"], capture_output=True, text=True,
                          env=env, timeout=850, cwd=Path(__file__).parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    history = [h for h in history if h["step"] > 0]  # step 0: the evaluation before training
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["actor/optimizer_steps"] >= 1 and h["rollout/sessions"] == 4 for h in history)
    # the engine sampled with the pixels: the trainer's recomputation agrees with the recorded log-probs
    assert all(h["rollout_corr/log_ppl_abs_diff"] < 1e-3 for h in history), [
        {k: v for k, v in h.items() if "ppl" in k} for h in history]
    with TraceStore.open(tmp_path / "traces.db") as store:
        sessions = [s for r in store.list_runs() if not r.id.endswith("-eval")
                    for s in store.list_sessions(r.id, limit=100)]
        versions = {store.get_session(s.id).steps[0].policy_version for s in sessions if s.metadata.get("step") == 2}
        assert versions == {1}  # step 2's rollouts were served by the updated policy
        step = next(st for s in sessions for st in store.get_session(s.id).steps)
        assert step.messages_seen[0]["content"][1]["image_url"]["url"].startswith("agentr1-image:")
