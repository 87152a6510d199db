"""The session page shows a step's images inline (stored by hash, served by the viewer), in every API's part shape."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import httpx
from PIL import Image
from viewer_harness import open_page

from agentr1.store import StepRecord, TraceStore


def png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def test_session_page_shows_step_images(tmp_path: Path, tiny_vlm_path: Path, page) -> None:
    from agentr1.gateway.server import BackgroundServer
    from agentr1.viewer import ViewerSettings, create_viewer_app

    red, blue = png((255, 0, 0), (30, 20)), png((0, 0, 255), (12, 12))
    db = f"sqlite:///{tmp_path / 'traces.db'}"
    store = TraceStore.open(db)
    sid = store.create_session(run_id="vlm")
    sent = [{"role": "user", "content": [
        {"type": "text", "text": "Compare "},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{base64.b64encode(red).decode()}"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(blue).decode()}},
    ]}]
    store.append_steps([StepRecord(session_id=sid, index=0, observation_ids=[1, 2, 3], action_ids=[4, 5],
                                   action_logprobs=[-1.0, -2.0], messages_sent=sent, messages_seen=sent,
                                   finish_reason="stop", action={"content": "red and blue"})])
    store.close()
    settings = ViewerSettings(db=db, tokenizer=str(tiny_vlm_path))
    with BackgroundServer(create_viewer_app(settings), ready_path="/api/health") as url:
        stored = TraceStore.open(db).get_session(sid).steps[0].messages_seen[0]["content"]
        sha = stored[1]["image_url"]["url"].split(":", 1)[1]
        response = httpx.get(f"{url}/api/images/{sha}")
        assert response.status_code == 200 and response.content == red
        assert response.headers["content-type"] == "image/png"
        assert httpx.get(f"{url}/api/images/{'0' * 64}").status_code == 404
        assert httpx.get(f"{url}/api/images/not-a-hash").status_code == 400
        open_page(page, f"{url}/sessions/{sid}")
        page.wait_for_function("Array.from(document.querySelectorAll('#step-0 img.msg-image')).length >= 2 && "
                               "Array.from(document.querySelectorAll('#step-0 img.msg-image'))"
                               ".every(i => i.complete && i.naturalWidth > 0)")
        sizes = page.eval_on_selector_all("#step-0 .sent img.msg-image", "s => s.map(i => [i.naturalWidth, i.naturalHeight])")
        assert sizes == [[30, 20], [12, 12]]
        assert "Compare" in page.inner_text("#step-0 .sent")
