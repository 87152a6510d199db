"""The search tool: BM25 (the ``bm25s`` library) over the pooled paragraphs of the shipped questions."""

from __future__ import annotations

import functools

import bm25s
from examples.hotpotqa.data import Paragraph, load_corpus

SEARCH_TOOL = {"type": "function", "function": {
    "name": "search",
    "description": "Search Wikipedia paragraphs. Returns the best matching paragraphs with their titles.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "what to look up"}},
                   "required": ["query"]}}}


def _tokens(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


class ParagraphIndex:
    """A BM25 index of paragraphs; a paragraph is indexed as its title followed by its text, since
    multi-hop questions often name the entity (the title) of the first hop."""

    def __init__(self, paragraphs: list[Paragraph]) -> None:
        if not paragraphs:
            raise ValueError("cannot index an empty corpus")
        self.paragraphs = paragraphs
        self.retriever = bm25s.BM25()
        self.retriever.index(_tokens([f"{p.title}. {p.text}" for p in paragraphs]), show_progress=False)

    def search(self, query: str, k: int = 2) -> list[Paragraph]:
        """The ``k`` best paragraphs for ``query``; none when no word of it is in the corpus."""
        words = [w for w in _tokens([query])[0] if w in self.retriever.vocab_dict]
        if not words:
            return []
        k = min(k, len(self.paragraphs))
        ids, scores = self.retriever.retrieve([words], k=k, show_progress=False)
        return [self.paragraphs[int(i)] for i, s in zip(ids[0], scores[0], strict=True) if s > 0]


@functools.cache
def default_index() -> ParagraphIndex:
    """The index over the shipped corpus, built once per process (about a second)."""
    return ParagraphIndex(load_corpus())


def search(query: str | None, k: int = 2, max_chars: int = 600) -> str:
    """What the tool returns to the model: the top ``k`` paragraphs, each cut to ``max_chars``."""
    if not isinstance(query, str) or not query.strip():
        return "error: the search tool needs a non-empty `query` string"
    found = default_index().search(query, k=k)
    if not found:
        return f"no paragraph matches {query!r}; try other words"
    return "\n\n".join(f"[{p.title}] {p.text[:max_chars]}" for p in found)
