"""Context policies: what the model sees of the agent's messages, ``o_{t+1} = C(z_0..z_t)``.

A policy turns the messages the agent sent into the messages the model sees (``messages_sent`` ->
``messages_seen``; the step stores both). It is chosen per session (``POST /sessions`` with
``{"context": {"policy": "sliding_window", "keep_last_turns": 4}}``, stored in the session's metadata
under ``"context"``) or gateway-wide (``--context-policy``). Policies:

- ``append_only`` (default): the messages as they are.
- ``sliding_window`` (``keep_last_turns``): the head (system prompt(s) up to and including the first
  user message, the task) and the last k turns. A turn is an assistant message with the tool / user
  messages that follow it, so an assistant tool call is never separated from its tool results.
- ``truncate_tool_outputs`` (``max_tool_tokens``): tool messages longer than the budget (counted with
  the gateway's tokenizer) are cut to it, with a marker ``... [truncated N tokens]``. Deterministic,
  so a tool output truncated on one call is truncated the same way on the next and the prompt still
  continues token for token.
- ``summary`` (``keep_last_turns``, ``max_summary_tokens``): like ``sliding_window``, but the turns
  older than the last k are replaced by one user message holding a summary written by the
  summarizer (``async (messages) -> str``; by default the gateway's own backend, see
  :func:`backend_summarizer`). Summaries are cached by the messages they summarize.

A policy that rewrites history (``sliding_window`` and ``summary`` once the window slides) makes the
next prompt a fresh render with ``drift=True``: the continuation compares the request with the
previous ``messages_seen``, and an edited history cannot be continued token for token.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentr1.core import Registry
from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.core.rendering import ROLE_ALIASES, RenderError, canonical_message, content_text

__all__ = [
    "POLICIES",
    "AppendOnly",
    "ContextPolicies",
    "ContextPolicy",
    "ContextPolicyError",
    "SlidingWindow",
    "Summarizer",
    "Summary",
    "TruncateToolOutputs",
    "backend_summarizer",
    "build_policy",
    "normalize_config",
    "split_turns",
]

log = logging.getLogger("agentr1.gateway.context")

Message = dict[str, Any]
Summarizer = Callable[[list[Message]], Awaitable[str]]
DEFAULT_POLICY = "append_only"
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
SUMMARY_INSTRUCTIONS = (
    "You summarize the earlier part of a conversation between a user, an AI assistant and tools, so that the "
    "assistant can continue the task without it. Keep every fact, number, tool result and decision that may "
    "still matter; drop pleasantries. Answer with the summary only."
)


class PolicyOptions(BaseModel):
    """A policy's options: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class ContextPolicyError(ValueError):
    """An unknown policy name or invalid options (the message lists the valid names)."""


def _role(message: Mapping[str, Any]) -> str:
    role = str(message.get("role", ""))
    return ROLE_ALIASES.get(role, role)


def split_turns(messages: Sequence[Message]) -> tuple[int, list[int]]:
    """``(head_len, turn_starts)``: the head is ``messages[:head_len]`` (everything up to and including
    the first user message; without one, the leading system messages); each turn starts at an
    assistant message after the head and runs to the next one."""
    roles = [_role(m) for m in messages]
    if "user" in roles:
        head = roles.index("user") + 1
    else:
        head = 0
        while head < len(roles) and roles[head] == "system":
            head += 1
    return head, [i for i in range(head, len(roles)) if roles[i] == "assistant"]


class ContextPolicy:
    """``apply(messages, tools) -> messages``: what the model sees. Never mutates its input."""

    name: ClassVar[str]

    Options: type[PolicyOptions] = PolicyOptions

    def __init__(self, options: BaseModel, *, tokenizer: Any = None, summarizer: Summarizer | None = None) -> None:
        self.options = options
        self.tokenizer = tokenizer
        self.summarizer = summarizer

    @property
    def config(self) -> dict[str, Any]:
        return {"policy": self.name, **self.options.model_dump()}

    async def apply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[Message]:
        raise NotImplementedError


POLICIES: Registry[type[ContextPolicy]] = Registry("context policy")


def register(cls: type[ContextPolicy]) -> type[ContextPolicy]:
    """Class decorator: the policy is available under its ``name``."""
    return POLICIES.register(cls.name)(cls)


@register
class AppendOnly(ContextPolicy):
    name = "append_only"

    async def apply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[Message]:
        return messages


@register
class SlidingWindow(ContextPolicy):
    name = "sliding_window"

    class Options(PolicyOptions):
        keep_last_turns: int = Field(4, ge=1)

    def window(self, messages: Sequence[Message]) -> tuple[int, int]:
        """``(head_len, start)``: keep ``messages[:head_len] + messages[start:]``; ``start == head_len``
        when nothing is dropped."""
        head, turns = split_turns(messages)
        k = self.options.keep_last_turns  # type: ignore[attr-defined]
        return head, (turns[-k] if len(turns) > k else head)

    async def apply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[Message]:
        head, start = self.window(messages)
        return messages if start == head else [*messages[:head], *messages[start:]]


@register
class TruncateToolOutputs(ContextPolicy):
    name = "truncate_tool_outputs"

    class Options(PolicyOptions):
        max_tool_tokens: int = Field(256, ge=1)

    def truncate(self, text: str) -> str:
        budget = self.options.max_tool_tokens  # type: ignore[attr-defined]
        if len(text.encode()) <= budget:  # a token covers at least one byte: surely within budget
            return text
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) <= budget:
            return text
        kept = self.tokenizer.decode(ids[:budget], skip_special_tokens=False)
        return f"{kept}\n... [truncated {len(ids) - budget} tokens]"

    async def apply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[Message]:
        out = []
        for message in messages:
            if _role(message) == "tool":
                try:
                    text = content_text(message.get("content"))
                except RenderError:  # non-text parts: left as they are
                    text = None
                if text is not None:
                    cut = self.truncate(text)
                    if cut != text:
                        message = {**message, "content": cut}
            out.append(message)
        return out


@register
class Summary(SlidingWindow):
    name = "summary"

    class Options(SlidingWindow.Options):
        max_summary_tokens: int = Field(256, ge=1)

    CACHE_SIZE: ClassVar[int] = 64

    def __init__(self, options: BaseModel, *, tokenizer: Any = None, summarizer: Summarizer | None = None) -> None:
        super().__init__(options, tokenizer=tokenizer, summarizer=summarizer)
        self._cache: OrderedDict[str, str] = OrderedDict()

    async def summarize(self, messages: list[Message]) -> str:
        key = hashlib.sha256(json.dumps([canonical_message(m) for m in messages], sort_keys=True,
                                        ensure_ascii=False).encode()).hexdigest()
        text = self._cache.get(key)
        if text is None:
            if self.summarizer is None:
                raise ContextPolicyError("the summary policy needs a summarizer")
            text = (await self.summarizer(messages)).strip()
            self._cache[key] = text
            while len(self._cache) > self.CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return text

    async def apply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[Message]:
        head, start = self.window(messages)
        if start == head:
            return messages
        text = await self.summarize(list(messages[head:start]))
        return [*messages[:head], {"role": "user", "content": SUMMARY_PREFIX + text}, *messages[start:]]


def normalize_config(config: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """``None`` / a name / JSON text / a mapping -> ``{"policy": name, **options}``."""
    if config is None:
        return {"policy": DEFAULT_POLICY}
    if isinstance(config, str):
        text = config.strip()
        if text.startswith("{"):
            try:
                config = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ContextPolicyError(f"context policy: invalid JSON ({exc})") from exc
        else:
            return {"policy": text or DEFAULT_POLICY}
    if not isinstance(config, Mapping):
        raise ContextPolicyError("context must be a policy name or an object {\"policy\": name, ...options}")
    out = dict(config)
    out.setdefault("policy", DEFAULT_POLICY)
    return out


def build_policy(config: str | Mapping[str, Any] | None, *, tokenizer: Any = None,
                 summarizer: Summarizer | None = None) -> ContextPolicy:
    """The policy a config names, its options validated. Raises :class:`ContextPolicyError`."""
    options = normalize_config(config)
    name = options.pop("policy")
    cls = POLICIES.entries.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ContextPolicyError(f"unknown context policy {name!r}; valid: {', '.join(POLICIES.names())}")
    try:
        parsed = cls.Options(**options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors())
        raise ContextPolicyError(f"context policy {name!r}: {problems}") from exc
    return cls(parsed, tokenizer=tokenizer, summarizer=summarizer)


def backend_summarizer(gw: Any, max_tokens: int = 256) -> Summarizer:
    """The default summarizer: the gateway's own backend, asked through the renderer with
    :data:`SUMMARY_INSTRUCTIONS` and the older turns as a transcript (greedy, ``max_tokens`` new
    tokens). The call is not recorded as a step of the session."""
    async def summarize(messages: list[Message]) -> str:
        renderer, backend = gw.renderer, gw.backend
        transcript = "\n\n".join(_transcript_line(m) for m in messages)
        # Leave room for the instructions, the template and the answer: cut the transcript's oldest part.
        room = max(64, backend.max_context - max_tokens - 256)
        ids = renderer.tokenizer.encode(transcript, add_special_tokens=False)
        if len(ids) > room:
            transcript = renderer.tokenizer.decode(ids[-room:], skip_special_tokens=False)
        prompt = renderer.render([{"role": "system", "content": SUMMARY_INSTRUCTIONS},
                                  {"role": "user", "content": transcript}], None, add_generation_prompt=True)
        result = await backend.generate(GenerateRequest(
            prompt_ids=prompt, sampling=SamplingParams(max_new_tokens=max_tokens, temperature=0.0)))
        return renderer.parse(result.output_ids).content or ""

    return summarize


def _transcript_line(message: Message) -> str:
    canonical = canonical_message(message)
    text = canonical["content"] if isinstance(canonical["content"], str) else json.dumps(canonical["content"])
    for call in canonical.get("tool_calls", []):
        text += f"\n[calls {call['name']} with {json.dumps(call['arguments'], ensure_ascii=False)}]"
    return f"{canonical['role']}: {text}"


class ContextPolicies:
    """Each session's policy: from its metadata's ``"context"``, else the gateway's default. Cached
    per session (LRU); a session the gateway has not seen (restart, another gateway) is looked up in
    the store once."""

    MAX_CACHED = 20_000

    def __init__(self, default: str | Mapping[str, Any] | None, *, tokenizer: Any = None,
                 summarizer: Summarizer | None = None,
                 make_summarizer: Callable[[int], Summarizer] | None = None) -> None:
        """``summarizer`` serves every summary policy; without it, ``make_summarizer(max_summary_tokens)``
        builds one per policy (the gateway passes :func:`backend_summarizer`)."""
        self.tokenizer = tokenizer
        self.summarizer = summarizer
        self.make_summarizer = make_summarizer
        self.default = self.build(default)  # fails at start-up for a bad gateway-wide policy
        self._by_session: OrderedDict[str, ContextPolicy] = OrderedDict()

    def build(self, config: str | Mapping[str, Any] | None) -> ContextPolicy:
        policy = build_policy(config, tokenizer=self.tokenizer, summarizer=self.summarizer)
        if isinstance(policy, Summary) and policy.summarizer is None and self.make_summarizer is not None:
            policy.summarizer = self.make_summarizer(policy.options.max_summary_tokens)  # type: ignore[attr-defined]
        return policy

    def remember(self, session_id: str, config: str | Mapping[str, Any] | None) -> ContextPolicy:
        policy = self.default if config is None else self.build(config)
        self._by_session[session_id] = policy
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self.MAX_CACHED:
            self._by_session.popitem(last=False)
        return policy

    def cached(self, session_id: str) -> ContextPolicy | None:
        policy = self._by_session.get(session_id)
        if policy is not None:
            self._by_session.move_to_end(session_id)
        return policy

    def from_metadata(self, session_id: str, metadata: Mapping[str, Any] | None) -> ContextPolicy:
        config = (metadata or {}).get("context")
        try:
            return self.remember(session_id, config)
        except ContextPolicyError as exc:  # validated at creation; a hand-edited row: say so, use the default
            log.warning("session %s: %s; using the gateway's default context policy", session_id, exc)
            return self.remember(session_id, None)
