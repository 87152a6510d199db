"""OpenAI Python SDK: ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients pointed at the gateway.

    from agentr1.adapters.openai import client
    reply = client().chat.completions.create(model="policy", messages=[...])

Created inside a session, a client is bound to it; created outside, it follows whichever session is
active at each call (see :func:`agentr1.adapters._endpoint.endpoint`).
"""

from __future__ import annotations

from typing import Any

import openai

from agentr1.adapters._endpoint import endpoint

__all__ = ["async_client", "client"]


def client(**kwargs: Any) -> openai.OpenAI:
    """An ``openai.OpenAI`` for the gateway; ``kwargs`` go to the constructor (timeout, max_retries, ...)."""
    base_url, api_key = endpoint()
    return openai.OpenAI(**{"base_url": base_url, "api_key": api_key, **kwargs})


def async_client(**kwargs: Any) -> openai.AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` for the gateway."""
    base_url, api_key = endpoint()
    return openai.AsyncOpenAI(**{"base_url": base_url, "api_key": api_key, **kwargs})
