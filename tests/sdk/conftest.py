"""A real gateway (uvicorn, instant backend with SmolLM2's real tokenizer and renderer) for SDK tests."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def echo_last_user(text: str) -> str:  # echo the last user line, so tests can see what was sent
    last_user = text.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]
    return f"echo: {last_user}"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, scripted_gateway):
    with scripted_gateway(tmp_path_factory.mktemp("sdk") / "sdk.db", echo_last_user) as served:
        yield served
