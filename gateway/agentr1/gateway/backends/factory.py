"""The backend that ``agentr1 gateway --backend sglang|vllm|litellm --backend-url URL`` asks for
(``GatewaySettings.backend`` and ``backend_urls``); the local backend is built in ``app.py``."""

from __future__ import annotations

from typing import Any

__all__ = ["remote_backend"]


def remote_backend(settings: Any) -> Any:
    """A SGLang / vLLM backend on ``settings.backend_urls``, rendering with the tokenizer of
    ``settings.model`` (a local HF directory of the served model, or ``smollm2``); or a LiteLLM
    backend for the external model ``settings.model`` (``backend_urls[0]``, if any, is its api_base)."""
    urls = list(settings.backend_urls)
    if settings.backend == "litellm":
        from .litellm_backend import LiteLLMBackend

        return LiteLLMBackend(settings.model, model_name=settings.served_model_name,
                              api_base=urls[0] if urls else None, timeout=settings.request_timeout_s)
    if settings.backend not in ("sglang", "vllm"):
        raise ValueError(f"unknown backend {settings.backend!r}: local, sglang, vllm or litellm")
    if not urls:
        raise ValueError(f"the {settings.backend} backend needs the servers' addresses (--backend-url URL)")
    from agentr1.core import resolve_model

    tokenizer = str(resolve_model(settings.model))
    if settings.backend == "sglang":
        from .sglang import SGLangBackend

        return SGLangBackend(urls, model_name=settings.served_model_name, tokenizer=tokenizer,
                             timeout=settings.request_timeout_s)
    from .vllm import VLLMBackend

    return VLLMBackend(urls, model_name=settings.served_model_name, tokenizer=tokenizer,
                       timeout=settings.request_timeout_s)
