"""The one place a backend is built from settings: :func:`build_backend` (``GatewaySettings.backend``
and ``backend_urls``). ``agentr1 gateway``, the embedded gateway (:class:`agentr1.gateway.
EmbeddedGateway`: the trainer, ``agentr1 eval``) and the benchmarks all come here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentr1.core import resolve_model

from .base import Backend

if TYPE_CHECKING:
    from agentr1.gateway.settings import GatewaySettings

    from .local import LocalBackend

__all__ = ["build_backend", "local_backend"]


def build_backend(settings: GatewaySettings, *, policy_version: int = 0) -> Backend:
    """The backend ``settings`` select, not started yet:

    - ``local``: the embedded engine on ``settings.model`` (``settings.engine``), serving
      ``policy_version`` until weights arrive;
    - ``sglang`` / ``vllm``: the servers at ``backend_urls``, rendering with the tokenizer of
      ``settings.model`` (a local HF directory of the served model, or ``smollm2``); they report
      their own policy version;
    - ``litellm``: the external model ``settings.model`` (``backend_urls[0]``, if any, is its api_base).
    """

    urls = list(settings.backend_urls)
    if settings.backend == "local":
        return local_backend(settings, policy_version=policy_version)
    if settings.backend == "litellm":
        from .litellm_backend import LiteLLMBackend

        return LiteLLMBackend(settings.model, model_name=settings.served_model_name,
                              api_base=urls[0] if urls else None, timeout=settings.request_timeout_s)
    if settings.backend not in ("sglang", "vllm"):
        raise ValueError(f"unknown backend {settings.backend!r}: local, sglang, vllm or litellm")
    if not urls:
        raise ValueError(f"the {settings.backend} backend needs the servers' addresses (--backend-url URL)")
    tokenizer = str(resolve_model(settings.model))
    if settings.backend == "sglang":
        from .sglang import SGLangBackend

        return SGLangBackend(urls, model_name=settings.served_model_name, tokenizer=tokenizer,
                             timeout=settings.request_timeout_s)
    from .vllm import VLLMBackend

    return VLLMBackend(urls, model_name=settings.served_model_name, tokenizer=tokenizer,
                       timeout=settings.request_timeout_s)


def local_backend(settings: GatewaySettings, *, policy_version: int = 0, engine_process: bool = False,
                  engine_address: Any = None) -> LocalBackend:
    """The embedded engine (:class:`~.local.LocalBackend`) on ``settings.model`` with the settings' engine
    options (``settings.engine``), not started yet; ``engine_address``: sharing another backend's engine
    process (its ``engine_address``) instead of loading the model."""

    from .local import LocalBackend

    return LocalBackend(resolve_model(settings.model), settings.engine, model_name=settings.served_model_name,
                        policy_version=policy_version, engine_process=engine_process, engine_address=engine_address)
