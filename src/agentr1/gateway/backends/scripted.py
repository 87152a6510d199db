"""A backend that answers each session with the assistant turns scripted for it (teacher forcing).

Expert demonstrations (an environment's walkthrough, a hand-written solution) are replayed
through the real gateway as ordinary sessions: the agent side sends its messages as usual, and
instead of sampling, this backend answers with the next scripted assistant message of that
session, as the policy's own tokens (:func:`~agentr1.core.rendering.turns.assistant_turn_ids`).
Everything else — prompt rendering, the exact multi-turn bridge, parsing the turn back into an
OpenAI message, storing observation/action ids — is the production path, so the stored steps
train exactly like the policy's own rollouts.

The policy did not sample these tokens: their log-probs are stored as 0.0 and the backend is
named ``scripted`` in every step. Such sessions are for supervised fine-tuning, not for
importance-weighted RL on the recorded log-probs."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from agentr1.core.generation import BackendError, GenerateRequest, GenerateResult
from agentr1.core.rendering import Message, Renderer, assistant_turn_ids
from agentr1.gateway.backends.instant import InstantBackend

__all__ = ["ScriptedBackend"]


class ScriptedBackend(InstantBackend):
    """``script(session_id, turns)`` before the session's calls; each call takes the next turn."""

    name = "scripted"

    def __init__(self, renderer: Renderer, *, model_name: str = "policy", max_context: int = 8192) -> None:
        super().__init__(renderer.tokenizer, model_name=model_name, max_context=max_context)
        self.renderer = renderer
        self._scripts: dict[str, deque[list[int]]] = {}

    def script(self, session_id: str, turns: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> None:
        """Queue ``turns`` (assistant messages) for ``session_id``, rendered to the policy's ids now,
        so a turn the template cannot render fails here, before the session starts."""
        self._scripts[session_id] = deque(assistant_turn_ids(self.renderer, turn, tools=tools) for turn in turns)

    def remaining(self, session_id: str) -> int:
        return len(self._scripts.get(session_id, ()))

    def forget(self, session_id: str) -> None:
        self._scripts.pop(session_id, None)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.calls += 1
        queue = self._scripts.get(request.session_id or "")
        if not queue:
            raise BackendError(f"session {request.session_id!r} has no scripted assistant turn left", status_code=400)
        ids = queue.popleft()
        if len(ids) > request.sampling.max_new_tokens:
            raise BackendError(f"the scripted turn has {len(ids)} tokens, more than max_tokens="
                               f"{request.sampling.max_new_tokens}", status_code=400)
        return GenerateResult(output_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop",
                              prompt_tokens=len(request.prompt_ids), policy_version=self._version)
