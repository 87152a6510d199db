"""The gateway in front of an external model (LiteLLM backend): the real openai client gets the
provider's answer, and the call is a recorded, non-trainable step with the text."""

from __future__ import annotations

import httpx
import openai
from test_litellm_backend import openai_server, served_chat

from agentr1.gateway.app import create_app
from agentr1.gateway.backends.litellm_backend import LiteLLMBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore


def test_external_model_steps_are_recorded_as_text_and_not_trainable(tmp_path):
    with served_chat(openai_server()) as provider_url:
        backend = LiteLLMBackend("openai/teacher", api_base=f"{provider_url}/v1", api_key="x")
        store = TraceStore.open(str(tmp_path / "ext.db"))
        app = create_app(GatewaySettings(db=str(tmp_path / "ext.db"), accept_any_model=True), store=store,
                         backend=backend)
        with BackgroundServer(app) as url:
            session = httpx.post(f"{url}/sessions", json={"task_id": "t"}).json()
            client = openai.OpenAI(base_url=session["base_url"], api_key=session["api_key"])
            reply = client.chat.completions.create(model="teacher", messages=[{"role": "user", "content": "hi"}])
            streamed = list(client.chat.completions.create(model="teacher", stream=True,
                                                           messages=[{"role": "user", "content": "hi"}]))
        assert reply.model_extra["agentr1"]["session_id"] == session["id"]
        steps = store.get_session(session["id"]).steps
        store.close()
    assert reply.choices[0].message.content
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == reply.choices[0].message.content
    assert len(steps) == 2 and not steps[0].trainable and steps[0].action_ids == []
    assert steps[0].action["content"] == reply.choices[0].message.content
