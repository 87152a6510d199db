"""OpenAI Agents SDK (``openai-agents``): models that call the gateway, on the SDK's default Responses API.

    from agents import Agent, Runner
    from agentr1.adapters.openai_agents import model
    agent = Agent(name="calc", tools=[...], model=model("policy"))

or once per process, keeping ``Agent(model="policy")`` as it is: ``use_gateway()``.
The gateway serves the Responses API (the SDK's default) and Chat Completions alike, recording both as
exact steps; ``api="chat_completions"`` picks the latter. Both turn the Agents SDK's tracing off: it would
export every run to OpenAI's servers (agentr1 records the calls itself).
"""

from __future__ import annotations

from typing import Literal

from agents import (
    Model,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from agentr1.adapters._endpoint import endpoint

__all__ = ["model", "use_gateway"]

API = Literal["responses", "chat_completions"]


def model(name: str = "policy", *, api: API = "responses", **client_kwargs: object) -> Model:
    """A model on the gateway for ``Agent(model=...)``: the Responses API by default, as the SDK's own."""
    set_tracing_disabled(True)
    base_url, api_key = endpoint()
    client = AsyncOpenAI(**{"base_url": base_url, "api_key": api_key, **client_kwargs})  # type: ignore[arg-type]
    if api == "chat_completions":
        return OpenAIChatCompletionsModel(model=name, openai_client=client)
    return OpenAIResponsesModel(model=name, openai_client=client)


def use_gateway(*, api: API = "responses", **client_kwargs: object) -> AsyncOpenAI:
    """Make the gateway the default for every agent of this process: models given by name call it through a
    client on the gateway's ``/v1``, which follows whichever session is active at each call, with the SDK's
    default API (Responses) unless ``api`` says otherwise. Returns the client."""
    set_tracing_disabled(True)
    base_url, api_key = endpoint(follow=True)
    client = AsyncOpenAI(**{"base_url": base_url, "api_key": api_key, **client_kwargs})  # type: ignore[arg-type]
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api(api)
    return client
