"""How much of a streamed choice's text is safe to send before the choice ends.

Text is released as it is sampled, except a tail that could still turn into a tool call, a reasoning
block or a stop string; those are resolved when the choice ends, from the same parse the non-streamed
answer uses, so streamed and non-streamed answers agree."""

from __future__ import annotations

__all__ = ["CHAT_MARKERS", "TextReleaser"]

CHAT_MARKERS = ("<tool_call>", "<think>", "<|")


class TextReleaser:
    """``release(text so far)`` -> the new text safe to send; ``finish(final text)`` -> what is left."""

    def __init__(self, markers: tuple[str, ...] | list[str], *, blocked: bool = False) -> None:
        self.markers = tuple(m for m in markers if m)
        self.sent = ""
        self.blocked = blocked  # e.g. a prompt prefilled with an opened tool call: nothing is plain text

    def release(self, text: str) -> str:
        if self.blocked:
            return ""
        cut = len(text)
        for marker in self.markers:
            at = text.find(marker)
            if at != -1:
                cut, self.blocked = min(cut, at), True
        if not self.blocked:  # hold back a tail that is a prefix of a marker
            for marker in self.markers:
                for k in range(min(len(marker) - 1, len(text)), 0, -1):
                    if text.endswith(marker[:k]):
                        cut = min(cut, len(text) - k)
                        break
        if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the rest of the character
            cut = min(cut, len(text.rstrip("\ufffd")))
        if cut <= len(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):cut], text[:cut]
        return delta

    def finish(self, content: str | None) -> str:
        content = content or ""
        return content[len(self.sent):] if content.startswith(self.sent) else ""
