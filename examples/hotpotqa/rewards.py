"""Exact match and F1 of the agent's final answer, with the standard SQuAD / HotpotQA normalisation
(lower case, no punctuation, no articles a/an/the, single spaces)."""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)
_ANSWER_PREFIX = re.compile(r"answer\s*:", re.IGNORECASE)
_CLOSED_ANSWERS = {"yes", "no", "noanswer"}  # HotpotQA: these score F1 only when they match exactly


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token-level F1 between the normalised answers (HotpotQA's official metric)."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _CLOSED_ANSWERS or ref in _CLOSED_ANSWERS) and pred != ref:
        return 0.0
    common = Counter(pred.split()) & Counter(ref.split())
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred.split()), overlap / len(ref.split())
    return 2 * precision * recall / (precision + recall)


def final_answer(text: str | None) -> str:
    """The answer in the agent's last message: what follows the last ``Answer:`` on its line, or the
    whole message when it has no such marker (a bare reply is an answer too)."""
    text = text or ""
    markers = list(_ANSWER_PREFIX.finditer(text))
    if markers:
        text = text[markers[-1].end():].strip().split("\n", 1)[0]
    return text.strip()


def session_answer(session: Any) -> str:
    """The final answer of a recorded session: its last step's content ("" when it has none)."""
    return final_answer(session.steps[-1].action.get("content")) if session.steps else ""


def exact_match_reward(session: Any, task: dict[str, Any]) -> float:
    return exact_match(session_answer(session), str(task["answer"]))


def f1_reward(session: Any, task: dict[str, Any]) -> float:
    return f1_score(session_answer(session), str(task["answer"]))
