"""Grammar-constrained decoding with xgrammar: a :class:`~agentr1.core.GrammarSpec` -> a per-row token mask.

The gateway turns ``response_format`` / ``text.format`` and forced tool calls into a ``GrammarSpec``
(``codecs/constraints.py``); :func:`build_grammar` makes the xgrammar grammar of one (JSON Schemas with
compact separators, ``", "`` and ``": "``, no free whitespace: a small model cannot pad forever). The
local engine compiles it once per spec for its tokenizer (:class:`GrammarCache`, least recently used
entries evicted) and gives each constrained row a :class:`RowGrammar`, a matcher that follows the row's
sampled tokens. Each step, :func:`grammar_mask` asks the constrained rows' matchers which tokens may
come next and returns them as a boolean mask the sampler applies (``sampling.sample_batch``): the
other logits become ``-inf`` before the softmax, so the recorded log-probability is the one of the
masked, renormalised distribution the token was drawn from. Rows without a grammar are not touched,
and a batch without one costs one pass over its rows. When the grammar is complete only the end tokens
(the model's end-of-turn ids and the request's ``stop_token_ids``) are allowed, so the row stops.

Remote backends get the same grammar as text: :func:`to_ebnf` (xgrammar's EBNF, which SGLang's and
vLLM's xgrammar backends parse). xgrammar is imported only when a grammar is used.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from agentr1.core.generation import GrammarSpec

__all__ = ["GrammarCache", "RowGrammar", "build_grammar", "grammar_mask", "to_ebnf"]

SEPARATORS = (", ", ": ")  # json.dumps' defaults: the form chat templates write tool calls in


def _xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError as exc:  # the gateway extra installs it; a bare install answers 400, not 500
        raise ValueError("constrained decoding needs the xgrammar package (pip install 'agentr1[gateway]')") from exc
    return xgrammar


def _literal(text: str) -> Any:
    import xgrammar as xgr

    return xgr.Grammar.from_ebnf("root ::= " + json.dumps(text)) if text else None


def _schema(text: str) -> Any:
    import xgrammar as xgr

    return xgr.Grammar.from_json_schema(text, any_whitespace=False, separators=SEPARATORS)


def build_grammar(spec: GrammarSpec) -> Any:
    """The ``xgrammar.Grammar`` of ``spec``; ValueError (with xgrammar's reason) when it cannot be built."""
    xgr = _xgrammar()
    try:
        if spec.kind == "json_object":
            return _schema('{"type": "object"}')
        if spec.kind == "json_schema":
            return _schema(spec.value)
        if spec.kind == "regex":
            return xgr.Grammar.from_regex(spec.value)
        if spec.kind == "ebnf":
            return xgr.Grammar.from_ebnf(spec.value)
        if spec.kind == "tagged_json":
            if not spec.alternatives:
                raise ValueError("tagged_json needs at least one alternative")
            first = _one_of(spec.alternatives)
            if not spec.more or spec.max_more < 1:
                return first
            more, none = _one_of(spec.more), xgr.Grammar.from_ebnf('root ::= ""')
            rest = none
            for _ in range(spec.max_more):  # none, or one more and then the rest: at most max_more more
                rest = xgr.Grammar.union(none, xgr.Grammar.concat(more, rest))
            return xgr.Grammar.concat(first, rest)
    except ValueError:
        raise
    except Exception as exc:  # xgrammar raises RuntimeError / its own errors for bad schemas and patterns
        reason = re.sub(r"^\[[\d:]+\] \S+: ", "", str(exc).strip())  # xgrammar's "[time] file.cc:line: " prefix
        raise ValueError(f"cannot build the {spec.kind} grammar: {reason}") from exc
    raise ValueError(f"unknown grammar kind {spec.kind!r}")


def _one_of(alternatives: tuple[tuple[str, str, str], ...]) -> Any:
    """The grammar of any one of ``alternatives`` (text before, JSON Schema, text after)."""
    import xgrammar as xgr

    options = []
    for before, schema, after in alternatives:
        parts = [g for g in (_literal(before), _schema(schema), _literal(after)) if g is not None]
        options.append(xgr.Grammar.concat(*parts) if len(parts) > 1 else parts[0])
    return xgr.Grammar.union(*options) if len(options) > 1 else options[0]


def to_ebnf(spec: GrammarSpec) -> str:
    """``spec`` as xgrammar EBNF text (root rule ``root``), for servers that take a grammar."""
    return str(build_grammar(spec))


class RowGrammar:
    """The grammar state of one row: which tokens may come next, advanced by each sampled token."""

    __slots__ = ("broken", "matcher")

    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher
        self.broken = False  # a token the grammar refused was appended (cannot happen when masked)

    @property
    def active(self) -> bool:
        return not self.broken and not self.matcher.is_terminated()

    def accept(self, token_id: int) -> None:
        if self.active and not self.matcher.accept_token(int(token_id)):
            self.broken = True

    def fill(self, bitmask: torch.Tensor, index: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, index)


class GrammarCache:
    """Compiled grammars of one tokenizer, keyed by spec (thread-safe; compiling runs off the engine thread)."""

    def __init__(self, tokenizer: Any, vocab_size: int, end_ids: Iterable[int], *, max_entries: int = 128,
                 threads: int = 2) -> None:
        import xgrammar as xgr

        self.end_ids = sorted(set(int(i) for i in end_ids))
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=self.end_ids)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=threads)
        self.max_entries = max_entries
        self._compiled: OrderedDict[GrammarSpec, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.compilations = 0

    def compiled(self, spec: GrammarSpec) -> Any:
        with self._lock:
            hit = self._compiled.get(spec)
            if hit is not None:
                self._compiled.move_to_end(spec)
                return hit
        compiled = self.compiler.compile_grammar(build_grammar(spec))
        with self._lock:
            self.compilations += 1
            self._compiled[spec] = compiled
            while len(self._compiled) > self.max_entries:
                self._compiled.popitem(last=False)
        return compiled

    def row(self, spec: GrammarSpec, stop_token_ids: Sequence[int] = ()) -> RowGrammar:
        """A fresh matcher for one row: the grammar, then one of the end tokens (or the row's stop ids)."""
        import xgrammar as xgr

        stops = sorted(set(self.end_ids) | {int(i) for i in stop_token_ids})
        return RowGrammar(xgr.GrammarMatcher(self.compiled(spec), override_stop_tokens=stops))


_SHIFTS: dict[torch.device, torch.Tensor] = {}


def grammar_mask(rows: Iterable[tuple[int, RowGrammar | None]], logits: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """For the constrained rows among ``(batch index, grammar)``: (their batch indices, a bool mask
    [n, vocab] of the tokens they may sample next), on ``logits``' device; None when no row is constrained."""
    active = [(i, g) for i, g in rows if g is not None and g.active]
    if not active:
        return None
    import xgrammar as xgr

    vocab = logits.shape[-1]
    bitmask = xgr.allocate_token_bitmask(len(active), vocab)
    for k, (_, grammar) in enumerate(active):
        grammar.fill(bitmask, k)
    device = logits.device
    allowed = unpack_on_host(bitmask, vocab) if device.type == "cpu" else unpack_on_device(bitmask, vocab, device)
    index = torch.tensor([i for i, _ in active], dtype=torch.long).to(device, non_blocking=True)
    return index, allowed


def unpack_on_host(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """xgrammar's int32 bitmask [n, words] -> bool [n, vocab] (bit j of word w: token 32 w + j), with numpy on
    one thread: torch's threaded ops would wait on busy cores for a few KB of bits."""
    bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=-1, bitorder="little")
    return torch.from_numpy(bits[:, :vocab].astype(np.bool_))


def unpack_on_device(bitmask: torch.Tensor, vocab: int, device: torch.device) -> torch.Tensor:
    """As :func:`unpack_on_host`, on ``device`` (one small copy, then shifts there)."""
    shifts = _SHIFTS.get(device)
    if shifts is None:
        shifts = _SHIFTS[device] = torch.arange(32, dtype=torch.int32, device=device)
    words = bitmask.to(device, non_blocking=True)
    return ((words[:, :, None] >> shifts) & 1).bool().reshape(words.shape[0], -1)[:, :vocab]
