"""Images reach the policy update: the batch builder carries each row's images (from the stored step), the
verl engine passes them to the model, and its log-probs equal a plain transformers forward pass with the same
pixel values, in ``compute_logprobs`` and inside the PPO update. Without the images they differ, and a row
whose images are missing is refused rather than trained on (tiny random Idefics3, CPU)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
import torch
from PIL import Image

from agentr1.core.rendering import PreviousTurn, VisionRenderer, load_vision_renderer, plan_prompt
from agentr1.store import StepRecord, TraceStore
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.policy.multimodal import MissingImagesError
from agentr1.trainer.rows import TrainRow


def png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def image_part(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{base64.b64encode(data).decode()}"}}


@pytest.fixture(scope="module")
def renderer(tiny_vlm_path: Path) -> VisionRenderer:
    return load_vision_renderer(tiny_vlm_path)


@pytest.fixture(scope="module")
def stored(tiny_vlm_path: Path, renderer: VisionRenderer, tmp_path_factory: pytest.TempPathFactory):
    """Two sessions stored as the gateway stores them: a two-turn one (an image per turn, the second turn
    extends the first token for token) and a one-turn one with an image of another shape (other tile count)."""
    db = tmp_path_factory.mktemp("mm") / "traces.db"
    store = TraceStore.open(f"sqlite:///{db}")
    action = renderer.tokenizer.encode("It is red.<|im_end|>", add_special_tokens=False)
    first = [{"role": "user", "content": [image_part(png((200, 0, 0), (40, 24))), {"type": "text", "text": "Colour?"}]}]
    plan1 = plan_prompt(None, first, None, renderer)
    reply = {"role": "assistant", "content": "It is red."}
    second = [*first, reply, {"role": "user", "content": [{"type": "text", "text": "And this?"},
                                                          image_part(png((0, 0, 200), (64, 20)))]}]
    plan2 = plan_prompt(PreviousTurn(first, None, plan1.prompt_ids, action, reply), second, None, renderer)
    assert plan2.continued
    other = [{"role": "user", "content": [image_part(png((0, 150, 0), (16, 60))), {"type": "text", "text": "Hm?"}]}]
    plan3 = plan_prompt(None, other, None, renderer)
    sessions = []
    for turns in ([(first, plan1), (second, plan2)], [(other, plan3)]):
        sid = store.create_session(run_id="mm")
        store.append_steps([StepRecord(session_id=sid, index=i, parent_index=i - 1 if i else None,
                                       observation_ids=plan.prompt_ids, action_ids=action,
                                       action_logprobs=[-1.0] * len(action), messages_sent=messages,
                                       messages_seen=messages, finish_reason="stop")
                            for i, (messages, plan) in enumerate(turns)])
        store.add_reward(sid, 1.0)
        store.finish_session(sid, status="finished")
        sessions.append(store.get_session(sid))
    yield store, sessions, [second, other]
    store.close()


@pytest.fixture(scope="module")
def policy(tiny_vlm_path: Path, stored):
    from agentr1.trainer.policy.local import LocalPolicy

    policy = LocalPolicy(tiny_vlm_path, device="cpu", lr=1e-3)
    policy.image_store = stored[0].images
    return policy


def rows_of(stored) -> list[TrainRow]:
    rows = build_rows(stored[1], BatchConfig(layout="merged")).rows
    for row in rows:
        row.advantages = [float(m) for m in row.response_mask]
    return rows


def plain_logprobs(path: Path, renderer: VisionRenderer, row: TrainRow, messages: list, *, images: bool) -> list[float]:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="sdpa").eval()
    ids = torch.tensor([row.prompt_ids + row.response_ids])
    extra = renderer.multimodal(messages).tensors if images else {}
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids, **extra).logits[0].float(), dim=-1)
    start = len(row.prompt_ids) - 1
    return [logp[start + i, t].item() if m else 0.0
            for i, (t, m) in enumerate(zip(row.response_ids, row.response_mask, strict=True))]


def test_batch_builder_carries_each_rows_images(stored, renderer: VisionRenderer) -> None:
    rows = rows_of(stored)
    assert len(rows) == 2  # the two-turn session merged into one row
    hashes = [tuple(renderer.multimodal(m).image_hashes) for m in stored[2]]
    assert [row.images for row in rows] == hashes
    assert len(rows[0].images) == 2 and rows[0].response_mask.count(0) > 0  # feedback with an image, mask 0
    sequence = rows[0].prompt_ids + rows[0].response_ids
    assert sequence.count(renderer.image_token_id) == sum(
        p.ids.count(renderer.image_token_id) for p in renderer.images(stored[2][0]))


def test_policy_logprobs_equal_a_plain_forward_with_the_same_pixels(policy, stored, renderer, tiny_vlm_path) -> None:
    rows = rows_of(stored)
    got = policy.compute_logprobs(rows)
    for row, messages, values in zip(rows, stored[2], got, strict=True):
        with_images = plain_logprobs(tiny_vlm_path, renderer, row, messages, images=True)
        without = plain_logprobs(tiny_vlm_path, renderer, row, messages, images=False)
        assert values == pytest.approx(with_images, abs=1e-4)
        # the images matter: the same ids without pixel values give other log-probs
        assert max(abs(a - b) for a, b in zip(values, without, strict=True)) > 1e-3


def test_update_sees_the_images(policy, stored, renderer, tiny_vlm_path) -> None:
    """ppo_kl = mean(old - current): zero when the old log-probs are the plain forward with the images, clearly
    not when they are the forward without them. So the training forward itself carries the pixels."""
    rows = rows_of(stored)
    without = [plain_logprobs(tiny_vlm_path, renderer, r, m, images=False) for r, m in zip(rows, stored[2], strict=True)]
    with_images = [plain_logprobs(tiny_vlm_path, renderer, r, m, images=True)
                   for r, m in zip(rows, stored[2], strict=True)]
    gap = sum(abs(a - b) for w, o in zip(with_images, without, strict=True) for a, b in zip(w, o, strict=True))
    assert gap > 1e-2
    vision_before = {n: t.clone() for n, t in policy.actor.named_tensors() if "vision" in n}
    metrics = policy.update(rows, old_log_probs=with_images)
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-5)
    assert metrics["actor/pg_clipfrac"] == 0.0
    after = policy.compute_logprobs(rows)
    flat = [v for r in after for v in r]
    assert flat != pytest.approx([v for r in with_images for v in r], abs=1e-4)  # the step changed the policy
    # the gradient reached the vision encoder through the image tokens
    vision_after = dict(policy.actor.named_tensors())
    assert vision_before and any(not torch.equal(t, vision_after[n]) for n, t in vision_before.items())
    metrics = policy.update(rows, old_log_probs=policy.compute_logprobs(rows))
    assert abs(metrics["actor/ppo_kl"]) < 1e-5


def test_missing_or_mismatched_images_are_refused(policy, stored) -> None:
    rows = rows_of(stored)
    dropped = TrainRow(**{**{f: getattr(rows[0], f) for f in rows[0].__slots__}, "images": ()})
    with pytest.raises(MissingImagesError, match="image tokens but no images"):
        policy.compute_logprobs([dropped])
    swapped = TrainRow(**{**{f: getattr(rows[0], f) for f in rows[0].__slots__}, "images": rows[1].images})
    with pytest.raises(MissingImagesError, match="images make"):
        policy.compute_logprobs([swapped])
    unknown = TrainRow(**{**{f: getattr(rows[1], f) for f in rows[1].__slots__}, "images": ("0" * 64,)})
    with pytest.raises(MissingImagesError, match="missing"):
        policy.compute_logprobs([unknown])
