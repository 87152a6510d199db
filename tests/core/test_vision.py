"""The vision-language renderer against the model's real processor (a tiny random Idefics3 on SmolLM2's
tokenizer): placeholder expansion equal to the processor's, pixel tensors reused by content hash, exact
continuation across turns with images, and a clear RenderError for bad images."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
import torch
from PIL import Image

from agentr1.core import is_vlm_dir, load_vlm_processor
from agentr1.core.rendering import (
    ImagePolicy,
    PreviousTurn,
    RenderError,
    VisionRenderer,
    image_identity,
    image_ref,
    load_renderer,
    load_vision_renderer,
    plan_prompt,
)


def png(color: tuple[int, int, int], size: tuple[int, int] = (40, 24), fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format=fmt)
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_part(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": data_url(data), "detail": "auto"}}


@pytest.fixture(scope="module")
def renderer(tiny_vlm_path: Path) -> VisionRenderer:
    return load_vision_renderer(tiny_vlm_path)


def test_tiny_vlm_is_a_real_idefics3_with_its_processor(tiny_vlm_path: Path) -> None:
    from transformers import AutoModelForImageTextToText

    assert is_vlm_dir(tiny_vlm_path)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path)
    processor = load_vlm_processor(tiny_vlm_path)
    assert type(model).__name__ == "Idefics3ForConditionalGeneration"
    assert type(processor).__name__ == "Idefics3Processor"
    assert model.config.image_token_id == processor.image_token_id
    assert model.config.text_config.vocab_size == len(processor.tokenizer)
    assert isinstance(load_renderer(tiny_vlm_path), VisionRenderer)


def test_ids_and_pixels_equal_the_processor(renderer: VisionRenderer) -> None:
    red, blue = png((220, 0, 0)), png((0, 0, 220), (20, 60))
    messages = [
        {"role": "system", "content": "Look closely."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image_part(red),
                                     {"type": "text", "text": "and this"}, image_part(blue)]},
    ]
    ids = renderer.render(messages)
    text = renderer.render_text(messages)
    assert text.count("<image>") == 2
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in (red, blue)]
    expected = renderer.processor(text=[text], images=[images], return_tensors="pt", add_special_tokens=False)
    assert ids == expected["input_ids"][0].tolist()
    mm = renderer.multimodal(messages)
    assert mm is not None and len(mm.image_hashes) == 2
    for key in ("pixel_values", "pixel_attention_mask"):
        assert torch.equal(mm.tensors[key], expected[key]), key
    # the image tokens in the ids are what the model scatters the image features into
    n_tiles = mm.tensors["pixel_values"].shape[1]
    assert ids.count(renderer.image_token_id) == n_tiles * renderer.processor.image_seq_len


def test_each_image_is_processed_once(renderer: VisionRenderer, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = renderer.processor.__class__.__call__

    def counting(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(renderer.processor.__class__, "__call__", counting)
    green = png((0, 200, 0), (33, 17))
    messages = [{"role": "user", "content": [image_part(green), {"type": "text", "text": "hi"}]}]
    first = renderer.render(messages)
    again = renderer.render([*messages, {"role": "assistant", "content": "ok"},
                             {"role": "user", "content": [image_part(green)]}])
    assert len(calls) == 1
    assert again[: len(first) - 3] == first[: len(first) - 3]


def test_continuation_with_images_extends_token_for_token(renderer: VisionRenderer) -> None:
    first = [{"role": "user", "content": [image_part(png((10, 10, 10))), {"type": "text", "text": "Describe."}]}]
    plan1 = plan_prompt(None, first, None, renderer)
    action = renderer.tokenizer.encode("A dark square.<|im_end|>", add_special_tokens=False)
    reply = {"role": "assistant", "content": "A dark square."}
    previous = PreviousTurn(messages=first, tools=None, prompt_ids=plan1.prompt_ids, action_ids=action,
                            assistant_message=reply)
    # the agent re-sends the history (detail dropped, same bytes) plus a new turn with another image
    history = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(png((10, 10, 10)))}},
                                            {"type": "text", "text": "Describe."}]}]
    second = [*history, reply, {"role": "user", "content": [{"type": "text", "text": "And now?"},
                                                            image_part(png((250, 250, 0), (64, 64)))]}]
    plan2 = plan_prompt(previous, second, None, renderer)
    assert plan2.continued and not plan2.drift
    assert plan2.prompt_ids[: len(plan1.prompt_ids) + len(action)] == plan1.prompt_ids + action
    assert plan2.prompt_ids == plan1.prompt_ids + action + plan2.new_ids
    # the whole prompt is what the processor makes of the whole conversation, sampled reply included
    assert plan2.prompt_ids == renderer.render([*second])  # the sampled ids are the canonical ones here
    mm = renderer.multimodal(second)
    assert mm is not None and len(mm.image_hashes) == 2
    # a different image in the history is not a continuation
    edited = [{"role": "user", "content": [image_part(png((11, 10, 10))), {"type": "text", "text": "Describe."}]},
              *second[1:]]
    assert plan_prompt(previous, edited, None, renderer).drift


def test_stored_reference_and_anthropic_block_are_the_same_image(renderer: VisionRenderer) -> None:
    data = png((1, 2, 3))
    sha = image_identity(image_part(data)).split(":", 1)[1]
    anthropic = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(data).decode()}}
    responses = {"type": "input_image", "image_url": data_url(data)}
    stored = {"type": "image_url", "image_url": {"url": image_ref(sha)}}
    assert {image_identity(p) for p in (anthropic, responses, stored)} == {f"sha256:{sha}"}
    as_openai = renderer.render([{"role": "user", "content": [image_part(data)]}])
    assert renderer.render([{"role": "user", "content": [anthropic]}]) == as_openai
    assert renderer.render([{"role": "user", "content": [responses]}]) == as_openai
    assert renderer.render([{"role": "user", "content": [stored]}]) == as_openai  # known by its hash already
    with pytest.raises(RenderError, match="cannot be resolved"):  # a fresh renderer must read the bytes
        VisionRenderer(renderer.text, renderer.processor).render([{"role": "user", "content": [stored]}])
    resolving = VisionRenderer(renderer.text, renderer.processor, resolve_ref={sha: data}.__getitem__)
    assert resolving.render([{"role": "user", "content": [stored]}]) == as_openai


@pytest.mark.parametrize(("part", "match"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "not valid base64"),
    ({"type": "image_url", "image_url": {"url": data_url(b"not an image")}}, "cannot be decoded"),
    ({"type": "image_url", "image_url": {"url": data_url(png((0, 0, 0))[:60])}}, "cannot be decoded"),
    ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}, "remote image URLs"),
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "file:// image URLs are disabled"),
    ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "unsupported image source"),
    ({"type": "image_url", "image_url": {}}, "needs an image URL"),
    ({"type": "image", "source": {"type": "base64", "media_type": "image/png"}}, "needs a data string"),
    ({"type": "input_image", "file_id": "file-123"}, "unsupported image source"),
    ({"type": "image_url", "image_url": {"url": data_url(png((0, 0, 0), (5000, 1000)))}}, "more than the limit"),
    ({"type": "image_url", "image_url": {"url": data_url(png((0, 0, 0), fmt="BMP"), "image/bmp")}}, "not supported"),
])
def test_bad_images_are_a_render_error(renderer: VisionRenderer, part: dict, match: str) -> None:
    strict = VisionRenderer(renderer.text, renderer.processor, policy=ImagePolicy(max_pixels=4000 * 1000))
    with pytest.raises(RenderError, match=match):
        strict.render([{"role": "user", "content": [part]}])


def test_limits_and_reserved_tokens(renderer: VisionRenderer, tmp_path: Path) -> None:
    small = VisionRenderer(renderer.text, renderer.processor, policy=ImagePolicy(max_bytes=100, max_images=1))
    with pytest.raises(RenderError, match="larger than the limit"):
        small.render([{"role": "user", "content": [image_part(png((0, 0, 0), (300, 300)))]}])
    two = [image_part(png((0, 0, 0), (2, 2)))] * 2
    with pytest.raises(RenderError, match="more than the limit of 1"):
        small.render([{"role": "user", "content": two}])
    for text in ("look: <image>", "<fake_token_around_image>", "<row_1_col_1>", "<global-img>"):
        with pytest.raises(RenderError, match="image token"):
            renderer.render([{"role": "user", "content": text}])
    # local files: only inside an allowed directory
    (tmp_path / "ok.png").write_bytes(png((5, 5, 5)))
    local = VisionRenderer(renderer.text, renderer.processor, policy=ImagePolicy(local_dirs=(tmp_path,)))
    url = (tmp_path / "ok.png").as_uri()
    assert local.render([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]) == \
        renderer.render([{"role": "user", "content": [image_part(png((5, 5, 5)))]}])
    with pytest.raises(RenderError, match="outside the directories"):
        local.render([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/hosts"}}]}])


def test_a_template_that_drops_content_parts_is_refused(renderer: VisionRenderer) -> None:
    """SmolVLM's own chat template iterates typed parts and emits nothing for string content: with it the text
    renderer would lose the placeholders (and the text), so the vision renderer refuses it at load."""
    import copy

    from transformers.models.smolvlm.processing_smolvlm import DEFAULT_CHAT_TEMPLATE

    from agentr1.core.rendering import create_renderer

    tokenizer = copy.deepcopy(renderer.tokenizer)
    tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
    with pytest.raises(RenderError, match="not supported for images"):
        VisionRenderer(create_renderer(tokenizer, "template"), renderer.processor)
