"""The renderer interface and the message helpers every renderer shares.

A :class:`Renderer` owns the conversion between OpenAI chat messages and the policy model's
token ids: ``render`` (messages + tools -> prompt ids), ``parse`` (sampled ids -> assistant
message), and the two pieces the exact multi-turn bridge needs, ``close_turn`` and
``render_tail`` (see :mod:`agentr1.core.rendering.continuation`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentr1.core.rendering.segments import SegmentEncoder

Message = dict[str, Any]
Tool = dict[str, Any]

# Roles OpenAI clients send that chat templates do not know: rendered as their modern equivalent.
ROLE_ALIASES = {"developer": "system", "function": "tool"}


class RenderError(ValueError):
    """The request cannot be rendered (unsupported content part, unknown tool, bad tool_choice)."""


@dataclass(slots=True)
class ParsedAction:
    """An assistant turn parsed from sampled ids, in OpenAI's shape.

    ``tool_calls`` are OpenAI tool calls ``{"id", "type": "function", "function": {"name",
    "arguments"}}`` with ``arguments`` a JSON string. ``invalid_tool_calls`` holds the raw text of
    ``<tool_call>`` blocks that did not parse (they stay in ``content``). ``finished`` is False when
    the turn has no end-of-turn token (length cut, stop string). ``parser``: the tool-call parser that
    read the turn (``hermes``, ``json``, ...: :mod:`agentr1.core.rendering.tool_parsers`)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str | None = None
    invalid_tool_calls: list[str] = field(default_factory=list)
    finished: bool = True
    parser: str | None = None

    def to_message(self) -> Message:
        """The OpenAI assistant message (``reasoning_content`` only when there is reasoning)."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        return message


@dataclass(frozen=True, slots=True)
class TurnClose:
    """How a sampled action becomes a closed assistant turn: keep ``action_ids[:kept]``, then
    append ``appended`` (the end-of-turn token when the model stopped without one)."""

    kept: int
    appended: tuple[int, ...] = ()


@runtime_checkable
class Renderer(Protocol):
    """Messages <-> token ids for one policy model. Implementations: ``ChatMLRenderer`` (our own
    ChatML + hermes tools, SmolLM2's format) and ``ChatTemplateRenderer`` (any HF chat template)."""

    tokenizer: Any
    end_of_turn_ids: tuple[int, ...]

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None = None,
        *,
        add_generation_prompt: bool = True,
        prefill: str = "",
    ) -> list[int]:
        """Prompt ids; ``prefill`` is text the assistant turn starts with (after the generation prompt)."""
        ...

    def parse(self, action_ids: Sequence[int], *, prefill: str = "", id_seed: str | None = None,
              tools: Sequence[Tool] | None = None) -> ParsedAction:
        """Sampled ids (``prefill`` text before them) -> content / tool calls / reasoning. ``tools``: the
        request's (formats such as bare JSON read only calls of declared functions)."""
        ...

    def close_turn(self, action_ids: Sequence[int]) -> TurnClose:
        """Where the sampled assistant turn ends, and what must be appended to close it."""
        ...

    def render_tail(
        self, messages: Sequence[Message], n_history: int, tools: Sequence[Tool] | None, *, prefill: str = "",
        prompt_ids: Sequence[int] = (), closed_action_ids: Sequence[int] = (),
    ) -> list[int] | None:
        """Ids that follow a closed assistant turn ``messages[n_history - 1]``: the new messages
        ``messages[n_history:]``, the generation prompt and ``prefill``. ``prompt_ids`` and
        ``closed_action_ids`` (the sampled turn, closed) are the ids this tail extends. None when
        the format cannot extend them exactly."""
        ...

    def tool_choice_prefill(self, tools: Sequence[Tool] | None, tool_choice: Any) -> str:
        """Text that forces the ``tool_choice`` ("" when nothing is enforced)."""
        ...


class TextRenderer:
    """Shared by renderers that build the prompt as text first: ``render`` encodes ``render_text``
    without adding special tokens (the text already holds them)."""

    tokenizer: Any

    def render_text(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                    add_generation_prompt: bool = True, prefill: str = "") -> str:
        raise NotImplementedError

    def _encode(self, text: str) -> list[int]:
        """``tokenizer.encode(text, add_special_tokens=False)``, the segments between special tokens that
        earlier prompts had tokenised taken from a cache (segments.py: exact, checked per tokenizer)."""
        encoder = self.__dict__.get("_segment_encoder")
        if encoder is None or encoder.tokenizer is not self.tokenizer:
            encoder = self._segment_encoder = SegmentEncoder(self.tokenizer)
        return encoder.encode(text)

    def render(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
               add_generation_prompt: bool = True, prefill: str = "") -> list[int]:
        return self._encode(self.render_text(messages, tools, add_generation_prompt=add_generation_prompt,
                                             prefill=prefill))


# ---------------------------------------------------------------------------------------------
# message helpers
# ---------------------------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """A message's text: a string, None (""), or a list of content parts (text parts joined).

    Non-text parts (images, audio, files) raise :class:`RenderError`: the policy is text-only and
    silently dropping them would train on a prompt the agent never meant."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") in ("text", "input_text", "output_text"):
                texts.append(str(part.get("text") or ""))
            elif isinstance(part, dict) and part.get("type") == "refusal":
                texts.append(str(part.get("refusal") or ""))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RenderError(f"content part of type {kind!r} is not supported: this model reads text only")
        return "".join(texts)
    raise RenderError(f"message content must be a string or a list of content parts, not {type(content).__name__}")


def tool_call_function(call: Any) -> dict[str, Any]:
    """The ``{"name", "arguments"}`` of an OpenAI tool call (or of a bare function dict)."""
    if not isinstance(call, dict):
        raise RenderError("tool_calls entries must be objects")
    fn = call.get("function", call)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RenderError("a tool call needs function.name")
    return fn


def decoded_arguments(arguments: Any) -> Any:
    """OpenAI's JSON-string arguments as an object (what chat templates expect, as vLLM passes
    them); a string that is not JSON stays a string; None -> {}."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def arguments_text(arguments: Any) -> str:
    """Tool-call arguments as the text the model sees: JSON re-serialised like Jinja's ``tojson``
    (``json.dumps``, non-ASCII kept), so agents' whitespace and escaping do not reach the prompt;
    a string that is not JSON verbatim."""
    value = decoded_arguments(arguments)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def normalize_messages(messages: Sequence[Message]) -> list[Message]:
    """Messages as the templates expect them: role aliases resolved (developer -> system, function
    -> tool), a legacy ``function_call`` turned into ``tool_calls``; content left as given."""
    out: list[Message] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RenderError("each message must be an object with a string role")
        m = dict(message)
        m["role"] = ROLE_ALIASES.get(m["role"], m["role"])
        if m["role"] == "assistant" and not m.get("tool_calls") and isinstance(m.get("function_call"), dict):
            m["tool_calls"] = [{"id": "call_legacy", "type": "function", "function": m["function_call"]}]
        if m["role"] not in ("system", "user", "assistant", "tool"):
            raise RenderError(f"unsupported message role {message['role']!r}")
        out.append(m)
    return out


def template_messages(messages: Sequence[Message]) -> list[Message]:
    """Messages as chat templates and ``renderers`` handle them: normalised roles, string content
    (text parts joined), tool-call arguments as objects (as vLLM passes them to templates)."""
    out = []
    for m in normalize_messages(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = tool_call_function(call)
                calls.append({**call, "type": call.get("type", "function"),
                              "function": {**fn, "arguments": decoded_arguments(fn.get("arguments"))}})
            m = {**m, "tool_calls": calls}
        out.append({**m, "content": content_text(m.get("content"))})
    return out


def tool_functions(tools: Sequence[Tool] | None) -> list[dict[str, Any]]:
    """The function specs of OpenAI tools (``{"type": "function", "function": {...}}``)."""
    out = []
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RenderError("tools must be [{'type': 'function', 'function': {'name': ..., ...}}]")
        out.append(fn)
    return out


def new_call_id(id_seed: str | None, index: int) -> str:
    """``call_<24 hex>``: derived from ``id_seed`` and the call's index when a seed is given (the same
    step parsed twice gets the same ids), random otherwise (unique across steps and sessions)."""
    if id_seed is None:
        return f"call_{uuid.uuid4().hex[:24]}"
    return f"call_{uuid.uuid5(uuid.NAMESPACE_URL, f'agentr1:{id_seed}:{index}').hex[:24]}"


def tool_choice_name(tools: Sequence[Tool] | None, tool_choice: Any) -> tuple[str, str | None]:
    """Validate ``tool_choice`` -> (mode, function name): mode is none | auto | required | named."""
    if tool_choice is None or tool_choice == "auto":
        return "auto", None
    if tool_choice in ("none", "required"):
        if tool_choice == "required" and not tools:
            raise RenderError("tool_choice 'required' needs tools")
        return str(tool_choice), None
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
        if isinstance(name, str):
            if name not in {f["name"] for f in tool_functions(tools)}:
                raise RenderError(f"tool_choice names function {name!r}, which is not in tools")
            return "named", name
    raise RenderError("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name'}}")
