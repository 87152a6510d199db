"""OpenAI Agents SDK (``openai-agents``): models that call the gateway's Chat Completions API.

    from agents import Agent, Runner
    from agentr1.adapters.openai_agents import model
    agent = Agent(name="calc", tools=[...], model=model("policy"))

or once per process, keeping ``Agent(model="policy")`` as it is: ``use_gateway()``.
Both turn the Agents SDK's tracing off: it would export every run to OpenAI's servers
(agentr1 records the calls itself).
"""

from __future__ import annotations

from agents import (
    OpenAIChatCompletionsModel,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from agentr1.adapters._endpoint import endpoint

__all__ = ["model", "use_gateway"]


def model(name: str = "policy", **client_kwargs: object) -> OpenAIChatCompletionsModel:
    """A Chat Completions model on the gateway for ``Agent(model=...)``."""
    set_tracing_disabled(True)
    base_url, api_key = endpoint()
    client = AsyncOpenAI(**{"base_url": base_url, "api_key": api_key, **client_kwargs})  # type: ignore[arg-type]
    return OpenAIChatCompletionsModel(model=name, openai_client=client)


def use_gateway(**client_kwargs: object) -> AsyncOpenAI:
    """Make the gateway the default for every agent of this process: models given by name use the
    Chat Completions API through a client on the gateway's ``/v1``, which follows whichever
    session is active at each call. Returns the client."""
    set_tracing_disabled(True)
    base_url, api_key = endpoint(follow=True)
    client = AsyncOpenAI(**{"base_url": base_url, "api_key": api_key, **client_kwargs})  # type: ignore[arg-type]
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("chat_completions")
    return client
