"""GiGPO anchor states: name the environment state a step acted from, so the trainer can compare
steps of different trajectories that started from the same state.

GiGPO (``algorithm.adv_estimator: gigpo``) groups the steps of a task's trajectories by their
anchor state. Without an anchor from the environment, the trainer uses a hash of the step's exact
observation token ids, which in a multi-turn episode only the first step of each sample shares
(later observations contain the sampled actions). An environment knows better: the calculator's
intermediate value, ALFWorld's observation text, a board position.

``anchor(text, step="last")`` records it for a step of the current session. It travels as a
zero-valued reward named ``anchor:<text>`` (source ``environment``) on that step: the gateway's
reward route and the store carry it unchanged, and a value of 0 changes no return. Text is
whitespace-normalised; text longer than :data:`MAX_ANCHOR_TEXT` characters is sent as its SHA-1
(``anchor:sha1:<hex>``), so equal texts always give equal anchors.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agentr1.sdk.client import arequest, request
from agentr1.sdk.step_target import alearn_last_step, learn_last_step, step_reward_call

__all__ = ["ANCHOR_PREFIX", "MAX_ANCHOR_TEXT", "aanchor", "anchor", "anchor_name", "anchor_of_reward_name"]

ANCHOR_PREFIX = "anchor:"
MAX_ANCHOR_TEXT = 200  # the store keeps reward names up to 255 characters


def anchor_name(text: str) -> str:
    """The reward name that carries anchor ``text``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"an anchor must be a non-empty string, got {text!r}")
    normal = " ".join(text.split())
    if len(normal) > MAX_ANCHOR_TEXT:
        normal = "sha1:" + hashlib.sha1(normal.encode()).hexdigest()
    return ANCHOR_PREFIX + normal


def anchor_of_reward_name(name: str) -> str | None:
    """The anchor a reward name carries (None for an ordinary reward)."""
    return name[len(ANCHOR_PREFIX):] if name.startswith(ANCHOR_PREFIX) else None


def anchor_call(text: str, step: int | str | None) -> tuple[Any, ...]:
    """The request (method, path, session, body) that records anchor ``text`` on ``step``."""
    if step is None:
        raise ValueError("an anchor belongs to a step: give step='last' or a step index")
    return step_reward_call(0.0, anchor_name(text), step, "environment")


def anchor(text: str, *, step: int | str = "last") -> None:
    """Record ``text`` as the anchor state of a step of the current session (default: the newest)."""
    learn_last_step(step)  # after a streamed answer: learn the newest step index first
    method, path, sess, body = anchor_call(text, step)
    request(method, path, sess, json=body)


async def aanchor(text: str, *, step: int | str = "last") -> None:
    """:func:`anchor` for async code."""
    await alearn_last_step(step)
    method, path, sess, body = anchor_call(text, step)
    await arequest(method, path, sess, json=body)
