"""Fixtures for the backend tests: the real local engine on a tiny random model, shared by the fake
SGLang / vLLM servers (their HTTP protocols, answered by that engine) of a test module."""

from __future__ import annotations

import pytest
from backend_helpers import run


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """The real local engine on the tiny model, shared by the fake servers of a test module."""
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend

    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", max_batch_size=8, threads=1))
    backend.engine.start()
    yield backend
    run(backend.close())


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    tok = engine.engine.tokenizer
    texts = ["<|im_start|>user\nWhat is 12*7?<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n",
             "Once upon a time"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]
