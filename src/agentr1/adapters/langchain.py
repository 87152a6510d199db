"""LangChain / LangGraph: a ``ChatOpenAI`` chat model that talks to the gateway.

    from agentr1.adapters.langchain import chat_model
    llm = chat_model("policy").bind_tools([calculator])   # use it in any chain or LangGraph graph

Built outside a session (say, when the graph is compiled at import), the model follows whichever
session is active at each call; built inside one, it is bound to it.
"""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI

from agentr1.adapters._endpoint import endpoint

__all__ = ["chat_model"]


def chat_model(model: str = "policy", **kwargs: Any) -> ChatOpenAI:
    """A ``ChatOpenAI`` on the gateway's Chat Completions API; ``kwargs`` go to ``ChatOpenAI``."""
    base_url, api_key = endpoint()
    # The gateway serves Chat Completions, not the Responses API that ChatOpenAI may otherwise pick.
    options: dict[str, Any] = {"model": model, "base_url": base_url, "api_key": api_key, "use_responses_api": False}
    return ChatOpenAI(**{**options, **kwargs})
