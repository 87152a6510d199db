"""agentr1.adapters: a few lines per agent framework on top of :mod:`agentr1.sdk`.

One module per framework, imported on demand (each imports its framework):

- :mod:`agentr1.adapters.openai` — ``client()`` / ``async_client()``: OpenAI SDK clients
- :mod:`agentr1.adapters.litellm` — ``kwargs()``, ``completion()``, ``acompletion()``
- :mod:`agentr1.adapters.langchain` — ``chat_model()``: a ``ChatOpenAI`` (LangChain, LangGraph)
- :mod:`agentr1.adapters.openai_agents` — ``model()``, ``use_gateway()``: OpenAI Agents SDK
- :mod:`agentr1.adapters.command` — ``run_tasks()``: any command, one session per run

Inside a session (``@rollout``, ``with session()``) what they build is bound to it; built outside,
it follows whichever session is active at each call. See ``docs/adapters/`` and ``docs/sessions.md``.
"""

__all__ = ["command", "langchain", "litellm", "openai", "openai_agents"]
