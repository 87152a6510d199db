"""An agent that shows the policy images, for the online multimodal training test (imported by `module:function`)."""

from __future__ import annotations

import base64
import io

from PIL import Image

from agentr1.sdk import openai_client

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "yellow": (230, 220, 20)}


def image_url(rgb: tuple[int, int, int], size: tuple[int, int]) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, rgb).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def make_tasks(split: str, n: int, seed: int) -> list[dict]:
    names = sorted(COLOURS)
    return [{"id": f"{split}-{seed}-{i}", "colour": names[(i + seed) % len(names)], "size": [24 + 8 * (i % 3), 20]}
            for i in range(n)]


def solve(task: dict) -> str:
    """Two calls, each with an image: the task's colour, then the same square at another size."""
    client = openai_client()
    rgb, size = COLOURS[task["colour"]], tuple(task["size"])
    messages = [{"role": "user", "content": [{"type": "text", "text": "Which colour?"},
                                             {"type": "image_url", "image_url": {"url": image_url(rgb, size)}}]}]
    reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=6, temperature=1.0)
    messages += [reply.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url(rgb, (64, 20))}},
                                              {"type": "text", "text": "And now?"}]}]
    final = client.chat.completions.create(model="policy", messages=messages, max_tokens=6, temperature=1.0)
    return final.choices[0].message.content or ""

