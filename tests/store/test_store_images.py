"""Images in the trace store: bytes stored once by content hash beside the database, steps keep references
in the agent's own part shapes, GET-style reads and both exports give the images back (SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
from PIL import Image
from store_workers import make_step

from agentr1.store import (
    IMAGE_REF_PREFIX,
    FeedbackRecord,
    ImageStore,
    TraceStore,
    export_run,
    image_refs,
    inline_images,
    session_with_images,
)


def png(color: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (7, 5), color).save(buffer, format="PNG")
    return buffer.getvalue()


RED, BLUE = png((255, 0, 0)), png((0, 0, 255))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def conversation(turns: int) -> list[dict]:
    """An agent that sends one screenshot per turn and re-sends the earlier ones (OpenAI + Anthropic shapes)."""
    messages: list[dict] = []
    for t in range(turns):
        image = RED if t % 2 == 0 else BLUE
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"turn {t}"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(image)}", "detail": "low"}},
        ]})
        messages.append({"role": "assistant", "content": f"seen {t}"})
    return messages


def test_steps_store_references_and_read_back_the_images(db_url: str, tmp_path: Path) -> None:
    with TraceStore.open(db_url, migrate=False, image_dir=tmp_path / "images") as store:
        sid = store.create_session(run_id="img")
        anthropic = [{"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": b64(BLUE)}}]}]
        store.append_steps([make_step(sid, i, messages_sent=conversation(i + 1)[:-1] if i else anthropic,
                                      messages_seen=conversation(i + 1)[:-1]) for i in range(3)],
                           [])
        store.append_steps([make_step(sid, 3)], [FeedbackRecord(sid, 2, conversation(4)[-2:-1], [1, 2])])
        stored = store.get_session(sid)
        raw = json.dumps([s.to_dict() for s in stored.steps], default=str)
        assert "base64," not in raw and b64(RED) not in raw and b64(BLUE) not in raw  # only references
        step2 = stored.steps[2]
        red_sha = ImageStore(tmp_path / "images").put(RED)  # already there: put is idempotent
        assert image_refs(step2.messages_seen) == [red_sha, image_refs(step2.messages_seen)[1], red_sha]
        assert sorted(p.name for p in (tmp_path / "images").rglob("*") if p.is_file()) == sorted(
            {red_sha, image_refs(step2.messages_seen)[1]})  # two images, stored once each
        # the shape of each part is kept: detail stays, the URL becomes a reference
        part = step2.messages_seen[0]["content"][1]
        assert part["image_url"]["detail"] == "low" and part["image_url"]["url"].startswith(IMAGE_REF_PREFIX)
        assert stored.steps[0].messages_sent[0]["content"][0]["source"]["data"].startswith(IMAGE_REF_PREFIX)
        # read back: exactly what the agent sent
        full = session_with_images(stored, store.images)
        assert full["steps"][2]["messages_seen"] == conversation(3)[:-1]
        assert full["steps"][0]["messages_sent"] == anthropic
        assert full["steps"][2]["feedback_messages"] == conversation(4)[-2:-1]


def test_exports_carry_the_images(db_url: str, tmp_path: Path) -> None:
    with TraceStore.open(db_url, migrate=False, image_dir=tmp_path / "images") as store:
        sid = store.create_session(run_id="exp-img")
        store.append_steps([make_step(sid, 0, messages_sent=conversation(2)[:-1], messages_seen=conversation(2)[:-1])])
        store.finish_session(sid, status="finished")
        export_run(store, "exp-img", tmp_path / "out.jsonl")
        export_run(store, "exp-img", tmp_path / "out.parquet")
    line = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
    assert line["steps"][0]["messages_seen"] == conversation(2)[:-1]
    row = pq.read_table(tmp_path / "out.parquet").to_pylist()[0]
    assert [(i["media_type"], i["data"]) for i in row["images"]] == [("image/png", RED), ("image/png", BLUE)]
    seen = json.loads(row["messages_seen"])
    assert inline_images(seen, ImageStore(tmp_path / "images")) == conversation(2)[:-1]


def test_default_directory_is_beside_a_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore.open(url) as store:
        assert store.images.root == tmp_path / "traces.db.images"
        sid = store.create_session()
        store.append_steps([make_step(sid, 0, messages_sent=conversation(1)[:-1])])
    assert [p.name for p in (tmp_path / "traces.db.images").rglob("*") if p.is_file()] == [
        image_refs(TraceStore.open(url).get_session(sid).steps[0].messages_sent)[0]]


def test_text_steps_are_untouched_and_bad_data_stays_inline(tmp_path: Path) -> None:
    images = ImageStore(tmp_path)
    text = [{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "x"}]}]
    from agentr1.store import externalize_images

    assert externalize_images(text, images) is text
    bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]}]
    assert externalize_images(bad, images) == bad
    assert not any(tmp_path.iterdir())
