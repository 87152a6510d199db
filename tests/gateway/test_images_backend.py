"""The local engine with images (tiny random Idefics3): generation sees the pixel values. Greedy output equals
transformers' generate with the same pixels, log-probs equal a plain forward, two images with identical prompt ids
never share cached keys and values, and a prompt with image tokens but no images is refused."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import io
from pathlib import Path

import pytest
import torch
from PIL import Image

from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.core.rendering import VisionRenderer, load_vision_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend


def image_message(rgb: tuple[int, int, int], size: tuple[int, int], text: str = "What is it?") -> list[dict]:
    buffer = io.BytesIO()
    Image.new("RGB", size, rgb).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def renderer(tiny_vlm_path: Path) -> VisionRenderer:
    return load_vision_renderer(tiny_vlm_path)


@pytest.fixture(scope="module")
def reference(tiny_vlm_path: Path):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(tiny_vlm_path, attn_implementation="sdpa").eval()


def greedy(model, ids: list[int], pixels: dict, n: int) -> tuple[list[int], list[float]]:
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             **pixels, do_sample=False, max_new_tokens=n)
        action = out[0, len(ids):].tolist()
        logp = torch.log_softmax(model(input_ids=out, **pixels).logits[0].float(), -1)
    return action, [logp[len(ids) - 1 + i, t].item() for i, t in enumerate(action)]


def test_generation_sees_the_pixels(tiny_vlm_path: Path, renderer: VisionRenderer, reference) -> None:
    async def main() -> None:
        backend = LocalBackend(tiny_vlm_path, EngineOptions(device="cpu", dtype="float32"))
        assert backend.accepts_images
        await backend.start()
        try:
            # same prompt ids (same tile layout), different pixels: red, then blue, then red again (cached prefix)
            for rgb in ((220, 20, 20), (20, 20, 220), (220, 20, 20)):
                messages = image_message(rgb, (40, 24))
                ids, mm = renderer.render(messages), renderer.multimodal(messages)
                request = GenerateRequest(ids, SamplingParams(max_new_tokens=8, temperature=0.0), multimodal=mm)
                result = await backend.generate(request)
                expected, logprobs = greedy(reference, ids, mm.tensors, 8)
                assert result.output_ids == expected[: len(result.output_ids)]
                assert result.logprobs == pytest.approx(logprobs[: len(result.logprobs)], abs=1e-4)
                streamed = [d async for d in backend.stream(request)]
                assert streamed[-1].result is not None and streamed[-1].result.output_ids == result.output_ids
            assert backend.stats.cached_tokens > 0  # the text before the first image is reused
            red, blue = (renderer.render(image_message(c, (40, 24))) for c in ((220, 20, 20), (20, 20, 220)))
            assert red == blue  # so only the pixels told the two apart above
            with pytest.raises(ValueError, match="image tokens but the request carries no images"):
                await backend.generate(GenerateRequest(red, SamplingParams(max_new_tokens=2)))
        finally:
            await backend.close()

    # in a thread of its own: a browser test earlier in the session may leave an event loop running in this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, main()).result()


def test_a_text_model_refuses_images(tiny_model_path: Path, renderer: VisionRenderer) -> None:
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu"))
    assert not backend.accepts_images
    messages = image_message((1, 2, 3), (8, 8))
    with pytest.raises(ValueError, match="takes no images"):
        backend.validate(GenerateRequest([1, 2, 3], SamplingParams(max_new_tokens=2),
                                         multimodal=renderer.multimodal(messages)))
