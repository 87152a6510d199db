"""Images through the gateway on the tiny random Idefics3: a real OpenAI client's two-turn conversation with an
image per turn is stored with exact ids (image tokens included), continued token for token, generated with the
pixels, returned by GET /sessions/{id} and the parquet export; bad images are a 400 in OpenAI's error shape."""

from __future__ import annotations

import base64
import io
import json
import random

import httpx
import openai
import pyarrow.parquet as pq
import pytest
import torch
from gateway_harness import serve
from PIL import Image

from agentr1.core.rendering import load_vision_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway import ImageSettings
from agentr1.store import IMAGE_REF_PREFIX, export_run

ON_CPU = EngineOptions(device="cpu")


def png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def user(text: str, image: bytes) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": data_url(image)}}]}


def plain_logprobs(model_path, prompt: list[int], action: list[int], pixels: dict) -> list[float]:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_path, attn_implementation="sdpa").eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + action]), **pixels).logits[0].float(), -1)
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(action)]


def test_two_turn_conversation_with_images(tmp_path, tiny_vlm_path) -> None:
    renderer = load_vision_renderer(tiny_vlm_path)
    red, blue = png((220, 30, 30), (40, 24)), png((30, 30, 220), (64, 20))
    with serve(tmp_path / "vlm.db", model=str(tiny_vlm_path), accept_any_model=True, engine=ON_CPU) as (url, store):
        session = httpx.post(f"{url}/sessions", json={"run_id": "vlm"}).json()
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["api_key"])
        messages = [user("What colour is this?", red)]
        first = client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0,
                                               logprobs=True)
        messages += [first.choices[0].message.model_dump(exclude_none=True), user("And this one?", blue)]
        second = client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0)
        assert second.choices[0].message.content is not None

        steps = store.get_session(session["id"]).steps
        assert len(steps) == 2
        s0, s1 = steps
        # exact ids: what the model's processor makes of the conversation, image tokens included
        assert s0.observation_ids == renderer.render(messages[:1])
        assert s0.observation_ids.count(renderer.image_token_id) > 0
        # the second turn extends the first token for token (no drift)
        assert s1.observation_ids[: len(s0.observation_ids) + len(s0.action_ids)] == s0.observation_ids + s0.action_ids
        assert not s1.drift and s1.parent_index == 0
        assert s1.observation_ids.count(renderer.image_token_id) == sum(
            p.ids.count(renderer.image_token_id) for p in renderer.images(messages))
        # generation saw the pixels: the recorded log-probs are the model's with the images
        pixels = renderer.multimodal(messages[:1]).tensors
        assert s0.action_logprobs == pytest.approx(
            plain_logprobs(tiny_vlm_path, s0.observation_ids, s0.action_ids, pixels), abs=1e-4)
        assert [t.logprob for t in first.choices[0].logprobs.content] == pytest.approx(s0.action_logprobs, abs=1e-6)
        # the step stores references, once per image
        stored_part = s1.messages_seen[2]["content"][1]
        assert stored_part["image_url"]["url"].startswith(IMAGE_REF_PREFIX)
        assert len([p for p in store.images.root.rglob("*") if p.is_file()]) == 2

        # GET /sessions/{id} gives the images back as sent
        trace = httpx.get(f"{url}/sessions/{session['id']}").json()
        assert trace["steps"][1]["messages_sent"][2] == messages[2]
        assert trace["steps"][1]["messages_seen"][0]["content"][1]["image_url"]["url"] == data_url(red)

        export_run(store, "vlm", tmp_path / "vlm.parquet")
        rows = sorted(pq.read_table(tmp_path / "vlm.parquet").to_pylist(), key=lambda r: r["index"])
        # a step's images: those of its messages and of its feedback (step 0's e_0 brought the blue one)
        assert [[i["data"] for i in r["images"]] for r in rows] == [[red, blue], [red, blue]]
        assert rows[1]["observation_ids"] == s1.observation_ids
        assert json.loads(rows[1]["messages_seen"])[2]["content"][1]["image_url"]["url"].startswith(IMAGE_REF_PREFIX)


def noise_png(rng: random.Random, side: int) -> bytes:
    buffer = io.BytesIO()
    Image.frombytes("RGB", (side, side), bytes(rng.randrange(256) for _ in range(side * side * 3))).save(buffer, "PNG")
    return buffer.getvalue()


BAD_PARTS: list[tuple[dict, str]] = [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}, "base64"),
    ({"type": "image_url", "image_url": {"url": data_url(b"GIF89a but not really")}}, "decoded"),
    ({"type": "image_url", "image_url": {"url": data_url(png((1, 2, 3), (30, 30))[:50])}}, "decoded"),
    ({"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest/meta-data"}}, "remote"),
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "file://"),
    ({"type": "image_url", "image_url": {"url": data_url(noise_png(random.Random(1), 60))}}, "larger"),
    ({"type": "image_url", "image_url": {"url": ""}}, "image URL"),
    ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "unsupported image source"),
]


def fuzzed_parts(n: int = 12) -> list[dict]:
    """Random bytes, random truncations of a real PNG, random URL strings."""
    rng, parts = random.Random(7), []
    for _ in range(n):
        blob = png((rng.randrange(256), 0, 0), (rng.randrange(1, 40), rng.randrange(1, 40)))
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        text = "".join(rng.choice("abc:/%;,=+ \n") for _ in range(rng.randrange(0, 40)))
        for url in (data_url(blob[: rng.randrange(1, len(blob) - 1)]), data_url(junk), text, "data:" + text):
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def test_bad_images_are_a_400_in_openai_shape(tmp_path, tiny_vlm_path) -> None:
    with serve(tmp_path / "bad.db", model=str(tiny_vlm_path), accept_any_model=True, engine=ON_CPU,
               image=ImageSettings(max_bytes=2000)) as (url, store):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        for part, hint in BAD_PARTS:
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(model="m", max_tokens=2, messages=[
                    {"role": "user", "content": [{"type": "text", "text": "look"}, part]}])
            error = caught.value.body
            assert isinstance(error, dict) and error.get("type") == "invalid_request_error", error
            assert hint in error["message"], (hint, error["message"])
        answered = 0
        for part in fuzzed_parts():  # a truncation that keeps every pixel may decode: 200; anything else 400
            response = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "max_tokens": 2, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look"}, part]}]})
            assert response.status_code in (200, 400), (part, response.status_code, response.text)
            if response.status_code == 400:
                assert response.json()["error"]["type"] == "invalid_request_error"
            answered += response.status_code == 200
        for text in ("<image>", "a <fake_token_around_image> b", "<row_1_col_1>"):
            with pytest.raises(openai.BadRequestError, match="image token"):
                client.chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": text}])
        stored = sum(len(store.get_session(s.id).steps) for s in store.list_sessions(limit=100))
        assert stored == answered  # refused calls are not recorded


def test_a_backend_without_images_refuses_them(tmp_path, tiny_vlm_path) -> None:
    from agentr1.gateway.backends.instant import InstantBackend

    renderer = load_vision_renderer(tiny_vlm_path)
    backend = InstantBackend(renderer.tokenizer, lambda ids: "ok", model_name="policy")
    with serve(tmp_path / "i.db", backend=backend, renderer=renderer, accept_any_model=True) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="does not take images"):
            client.chat.completions.create(model="m", max_tokens=2, messages=[user("hi", png((0, 0, 0), (8, 8)))])
        text = client.chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
        assert text.choices[0].message.content == "ok"


def test_anthropic_image_blocks(tmp_path, tiny_vlm_path) -> None:
    """A real Anthropic client: base64 image blocks, two turns extending token for token; a bad image is a 400 in
    Anthropic's error shape."""
    import anthropic

    renderer = load_vision_renderer(tiny_vlm_path)
    red, blue = png((220, 30, 30), (40, 24)), png((30, 30, 220), (64, 20))

    def block(data: bytes) -> dict:
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                            "data": base64.b64encode(data).decode()}}

    with serve(tmp_path / "a.db", model=str(tiny_vlm_path), accept_any_model=True, engine=ON_CPU) as (url, store):
        session = httpx.post(f"{url}/sessions", json={}).json()
        client = anthropic.Anthropic(base_url=f"{url}/sessions/{session['id']}", api_key=session["api_key"] or "x",
                                     max_retries=0)
        messages = [{"role": "user", "content": [block(red), {"type": "text", "text": "Colour?"}]}]
        first = client.messages.create(model="m", max_tokens=6, messages=messages)
        messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                     {"role": "user", "content": [{"type": "text", "text": "And this?"}, block(blue)]}]
        client.messages.create(model="m", max_tokens=6, messages=messages)
        s0, s1 = store.get_session(session["id"]).steps
        canonical = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(red)}}, {"type": "text", "text": "Colour?"}]}]
        assert s0.observation_ids == renderer.render(canonical)  # the same ids as the OpenAI shape
        assert s1.observation_ids[: len(s0.observation_ids) + len(s0.action_ids)] == s0.observation_ids + s0.action_ids
        assert not s1.drift
        assert s1.messages_sent[-1]["content"][1]["source"]["data"].startswith(IMAGE_REF_PREFIX)
        trace = httpx.get(f"{url}/sessions/{session['id']}", headers={"x-api-key": session["api_key"] or ""}).json()
        assert trace["steps"][1]["messages_sent"][-1]["content"][1] == block(blue)
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model="m", max_tokens=2, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"}}]}])
        assert caught.value.body["type"] == "error" and "decoded" in caught.value.body["error"]["message"]


def test_responses_input_image(tmp_path, tiny_vlm_path) -> None:
    """The real OpenAI client on the Responses API: ``input_image`` parts, two turns token for token through
    ``previous_response_id``; a disallowed image is a 400."""
    renderer = load_vision_renderer(tiny_vlm_path)
    red, blue = png((220, 30, 30), (40, 24)), png((30, 30, 220), (64, 20))
    with serve(tmp_path / "r.db", model=str(tiny_vlm_path), accept_any_model=True, engine=ON_CPU) as (url, store):
        session = httpx.post(f"{url}/sessions", json={}).json()
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["api_key"] or "x", max_retries=0)
        first = client.responses.create(model="m", max_output_tokens=6, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Colour?"}, {"type": "input_image", "image_url": data_url(red)}]}])
        client.responses.create(model="m", max_output_tokens=6, previous_response_id=first.id, input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": data_url(blue)},
                                         {"type": "input_text", "text": "And this?"}]}])
        s0, s1 = store.get_session(session["id"]).steps
        assert s0.observation_ids == renderer.render([user("Colour?", red)])  # the same ids as chat's shape
        assert s1.observation_ids[: len(s0.observation_ids) + len(s0.action_ids)] == s0.observation_ids + s0.action_ids
        assert not s1.drift
        with pytest.raises(openai.BadRequestError, match="remote image URLs"):
            client.responses.create(model="m", max_output_tokens=2, input=[{"role": "user", "content": [
                {"type": "input_image", "image_url": "https://example.com/a.png"}]}])
