"""Tokenisation by segments between special tokens, each segment's ids cached.

A Hugging Face tokenizer matches its added special tokens (``<|im_start|>``, ``<|im_end|>``, ...) in the
text first and tokenises the text between them piece by piece, so the ids of a rendered prompt are the ids
of its segments (the special tokens and the texts between them) put together. Agents resend what earlier
calls sent -- the system prompt, the tool block, the history of the session -- so most segments of a call's
prompt were tokenised before: :class:`SegmentEncoder` tokenises only the new ones (for the peer benchmark's
11-message prompt, ~300 tokens, the last message instead of all of them).

It is exact or off: at construction it checks, on probe texts around every special token it splits at, that
segment-wise ids equal whole-text ids (a tokenizer whose normaliser or pre-tokeniser looks across the
boundaries, e.g. SentencePiece's "prepend a space to the first word", fails and is used whole), and it splits
only at special tokens that strip nothing around themselves.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = ["SegmentEncoder"]

CACHE_SEGMENTS = 8192  # distinct segment texts kept (a system prompt, a tool block, each message's text, ...)
_PROBES = ("user\nHello  there, 12+7=19.\n", " leading space", "\n\n", "assistant\n<tool_call>\n{\"a\": 1}",
           "é ü 中文 🙂 tabs\tand  spaces ", "")


class SegmentEncoder:
    """``encode(text)``: the ids ``tokenizer.encode(text, add_special_tokens=False)`` gives, from cached
    segments when the tokenizer allows it (``exact``), else from the whole text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        specials = _splittable_specials(tokenizer)
        self._split = re.compile("(" + "|".join(map(re.escape, specials)) + ")").split if specials else None
        self._segment = lru_cache(maxsize=CACHE_SEGMENTS)(self._tokenize)
        self.exact = self._split is not None and all(
            self._by_segments(text) == self._encode_whole(text) for text in _probe_texts(specials))

    def encode(self, text: str) -> list[int]:
        return self._by_segments(text) if self.exact else self._encode_whole(text)

    def _by_segments(self, text: str) -> list[int]:
        assert self._split is not None
        ids: list[int] = []
        for part in self._split(text):
            if part:
                ids.extend(self._segment(part))
        return ids

    def _encode_whole(self, text: str) -> list[int]:
        return list(self._tokenize(text))

    def _tokenize(self, text: str) -> tuple[int, ...]:  # a tuple: the cache hands the same one out again
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))


def _splittable_specials(tokenizer: Any) -> list[str]:
    """The added special tokens that are matched as they are: no stripping of neighbouring spaces, not
    whole-word-only, not normalised (those change the text around them)."""
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if not isinstance(added, dict):
        return []
    found = []
    for token in added.values():
        content = getattr(token, "content", None)
        if (content and getattr(token, "special", False) and not getattr(token, "lstrip", False)
                and not getattr(token, "rstrip", False) and not getattr(token, "single_word", False)
                and not getattr(token, "normalized", False)):
            found.append(content)
    return sorted(set(found), key=len, reverse=True)  # longest first: "<|a|>x" before "<|a|>"


def _probe_texts(specials: list[str]) -> list[str]:
    texts = []
    for special in specials:
        for before in _PROBES:
            for after in _PROBES:
                texts.append(f"{before}{special}{after}{special}{before}")
    texts.append("".join(f"{s}x {s}\n" for s in specials))
    return texts
