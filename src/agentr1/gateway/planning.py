"""Which earlier step of its session a chat call continues, and the prompt that follows from it.

In order:
1. the session's last call (each of its choices, the newest first): the request extends one -> the prompt
   extends that step's prompt + sampled ids token for token;
2. the session's recent steps (``CallHistory.recent``): the request extends an earlier step -> the same
   exact continuation from there, a new branch of the session (a sub-agent or a retry that rewinds);
3. none: the prompt is rendered afresh. A request that carries no assistant turn starts a new conversation:
   a new branch, not drift, with the step it shares the longest history with as its parent (None if it
   shares nothing). One that does carry assistant turns rewrote the history it had (edited, compacted, or
   trimmed by the context policy): drift, with the last call as its parent.
A repeated request (a client retry or a deliberate resample) is a sibling of the last call: the same parent
and the same drift."""

from __future__ import annotations

from typing import Any

from agentr1.core.rendering import PreviousTurn, PromptPlan, canonical_message, plan_prompt
from agentr1.gateway.call_history import CallHistory

__all__ = ["plan_for_session"]


def plan_for_session(renderer: Any, state: CallHistory, seen: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None, tool_choice: Any) -> tuple[PromptPlan, int | None]:
    """(the prompt plan, the parent step's index) for a call showing the model ``seen``."""
    fallback: PromptPlan | None = None
    for index, previous in reversed(state.previous):
        plan = plan_prompt(previous, seen, tools, renderer, tool_choice=tool_choice)
        if plan.continued:
            return plan, index
        if plan.reason == "repeat":  # the last call's observation again (a retry or a resample): its sibling
            plan.drift = state.previous_drift
            return plan, state.previous_parent
        fallback = fallback or plan
    last_call = {index for index, _ in state.previous}
    for index, previous in reversed(state.recent):
        if index in last_call or not _may_extend(previous, seen):
            continue
        plan = plan_prompt(previous, seen, tools, renderer, tool_choice=tool_choice)
        if plan.continued:  # a branch from an earlier step
            return plan, index
    if fallback is None:
        return plan_prompt(None, seen, tools, renderer, tool_choice=tool_choice), None
    if any(m.get("role") == "assistant" for m in seen):
        return fallback, state.previous[-1][0]
    fallback.drift = False  # a new conversation in the session: a new branch
    return fallback, _fork_point(state, seen)


def _may_extend(previous: PreviousTurn, seen: list[dict[str, Any]]) -> bool:
    """A cheap filter before rendering: the request is longer and starts with the same message."""
    return len(seen) > len(previous.messages) and bool(previous.messages) and \
        canonical_message(previous.messages[0]) == canonical_message(seen[0])


def _fork_point(state: CallHistory, seen: list[dict[str, Any]]) -> int | None:
    """The recent step whose history shares the most leading messages with ``seen`` (None: none shares any)."""
    canonical = [canonical_message(m) for m in seen]
    best, best_index = 0, None
    for index, previous in reversed(state.recent):
        shared = 0
        for mine, theirs in zip(canonical, previous.messages, strict=False):
            if mine != canonical_message(theirs):
                break
            shared += 1
        if shared > best:
            best, best_index = shared, index
    return best_index
