"""LiteLLM: route ``litellm.completion`` / ``acompletion`` to the gateway as an OpenAI-compatible
provider (model ``openai/<name>`` with ``api_base``).

    from agentr1.adapters import litellm as a1
    reply = a1.completion(model="policy", messages=[...])          # or: litellm.completion(**a1.kwargs("policy"), ...)

Set ``LITELLM_LOCAL_MODEL_COST_MAP=True`` in offline environments: LiteLLM otherwise fetches its
cost map at import and retries for ~10 s.
"""

from __future__ import annotations

from typing import Any

import litellm as _litellm

from agentr1.adapters._endpoint import endpoint

__all__ = ["acompletion", "completion", "kwargs"]


def kwargs(model: str = "policy") -> dict[str, Any]:
    """``model``/``api_base``/``api_key`` for a LiteLLM call to the gateway now (bound to the current
    session if one is active). ``model`` gets the ``openai/`` provider prefix unless it has it."""
    base_url, api_key = endpoint()
    name = model if model.startswith("openai/") else f"openai/{model}"
    return {"model": name, "api_base": base_url, "api_key": api_key}


def completion(model: str = "policy", **call: Any) -> Any:
    """``litellm.completion`` against the gateway; ``call`` holds the usual arguments (messages, tools, stream, ...)."""
    return _litellm.completion(**{**kwargs(model), **call})


async def acompletion(model: str = "policy", **call: Any) -> Any:
    """``litellm.acompletion`` against the gateway."""
    return await _litellm.acompletion(**{**kwargs(model), **call})
