"""Token-level views of a session: each step's action decoded token by token with its logprob, and
the rows the trainer trains on (prefix-merged or per step: the store's one row layout) with their training mask.

Tokens are decoded one at a time with the model's tokenizer: ``--tokenizer DIR`` if given, else the model directory
that served the steps (each step records it: ``model_path``), else the cached model directory named like the steps'
``model``; without one, ids are shown as they are.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentr1.store import SessionRecord, StepRecord, TokenRow, lay_out_rows
from agentr1.viewer.branches import session_branches
from agentr1.viewer.schemas import RowsView, RowView, SessionDetail, StepView, Token, step_fields

log = logging.getLogger("agentr1.viewer")


class Tokenizers:
    """Loads tokenizers lazily (once per directory) and decodes ids one token at a time."""

    def __init__(self, explicit: str | None = None) -> None:
        self.explicit = explicit
        self._loaded: dict[str, Any] = {}
        self._pieces: dict[str, dict[int, str]] = {}
        self._lock = threading.Lock()

    def resolve(self, steps: Iterable[StepRecord]) -> str | None:
        """The tokenizer directory to decode ``steps`` with (see the module docstring)."""
        if self.explicit:
            return self.explicit
        steps = list(steps)
        for served in dict.fromkeys(s.model_path for s in steps if s.model_path):
            if (Path(served).expanduser() / "tokenizer_config.json").exists():
                return served
        model_names = sorted({s.model for s in steps if s.model})
        try:
            from agentr1.core import models_cache_dir

            root = models_cache_dir()
        except ImportError:  # pragma: no cover - the gateway extra is what serves the viewer
            return None
        for name in model_names:
            candidate = root / name
            if name and (candidate / "tokenizer_config.json").exists():
                return str(candidate)
        return None

    def get(self, path: str | None) -> Any:
        if path is None:
            return None
        with self._lock:
            if path not in self._loaded:
                try:
                    from transformers import AutoTokenizer

                    self._loaded[path] = AutoTokenizer.from_pretrained(str(Path(path).expanduser()))
                except Exception as exc:
                    log.warning("cannot load the tokenizer at %s: %s", path, exc)
                    self._loaded[path] = None
                self._pieces[path] = {}
            return self._loaded[path]

    def pieces(self, path: str | None, ids: list[int]) -> list[str | None]:
        """Each id decoded alone (special tokens kept); ``None`` for every id without a tokenizer."""
        tok = self.get(path)
        if tok is None or path is None:
            return [None] * len(ids)
        cache = self._pieces[path]
        missing = sorted({i for i in ids if i not in cache})
        if missing:
            texts = tok.batch_decode([[i] for i in missing], skip_special_tokens=False)
            with self._lock:
                cache.update(zip(missing, texts, strict=True))
        return [cache[i] for i in ids]


def _messages_diff(sent: list[Any], seen: list[Any]) -> tuple[list[int], int]:
    """Positions of ``seen`` holding a message the agent did not send (rewritten, summarised), and
    how many of the sent messages the model did not see (dropped by a window)."""
    return [i for i, m in enumerate(seen) if m not in sent], sum(1 for m in sent if m not in seen)


def step_view(step: StepRecord, previous: StepRecord | None, tokenizers: Tokenizers, path: str | None) -> StepView:
    seen = step.messages_seen or []
    sent = step.messages_sent or []
    diff, dropped = _messages_diff(sent, seen) if seen else ([], 0)
    texts = tokenizers.pieces(path, step.action_ids)
    logprobs: list[float | None] = [*step.action_logprobs] if step.action_logprobs else [None] * len(step.action_ids)
    tokens = [Token(id=i, text=t, logprob=lp, mask=1 if step.trainable else 0, step=step.index, kind="action")
              for i, t, lp in zip(step.action_ids, texts, logprobs, strict=False)]
    extends: bool | None = None
    new_obs = len(step.observation_ids)
    if previous is not None:  # the parent step when there is one, else the step before
        before = [*previous.observation_ids, *previous.action_ids]
        extends = step.observation_ids[: len(before)] == before
        if extends:
            new_obs = len(step.observation_ids) - len(before)
    return StepView(
        **step_fields(step), seen_differs=bool(seen) and seen != sent, seen_diff=diff, n_dropped=dropped,
        n_observation=len(step.observation_ids), n_new_observation=new_obs,
        n_feedback=len(step.feedback_ids) if step.feedback_ids is not None else None,
        extends_previous=extends, compared_to=None if previous is None else previous.index, action_tokens=tokens,
    )


def session_detail(record: SessionRecord, summary: Any, tokenizers: Tokenizers) -> SessionDetail:
    from agentr1.viewer.schemas import RewardView

    path = tokenizers.resolve(record.steps)
    steps = sorted(record.steps, key=lambda s: s.index)
    by_index = {s.index: s for s in steps}
    views = [step_view(s, by_index.get(s.parent_index) if s.parent_index is not None else steps[i - 1] if i else None,
                       tokenizers, path) for i, s in enumerate(steps)]
    branches, superseded = session_branches(steps)
    branch_of = {i: b.id for b in branches for i in b.steps}
    for view in views:
        view.branch = branch_of.get(view.index)
        view.children = [s.index for s in steps if s.parent_index == view.index and s.index in branch_of]
    rewards = [RewardView(name=r.name, value=r.value, step_index=r.step_index, source=r.source) for r in record.rewards]
    return SessionDetail(session=summary, metadata=record.metadata or {}, rewards=rewards, steps=views,
                         branches=branches, superseded_steps=superseded,
                         tokenizer=path if tokenizers.get(path) is not None else None)


# -- rows (what the trainer trains on) --------------------------------------------------------


def session_rows(record: SessionRecord, layout: str, tokenizers: Tokenizers) -> RowsView:
    """The session as the trainer's rows: the store's one row layout (:func:`agentr1.store.lay_out_rows`), the one
    the trainer's batch builder trains on; every status shown (the trainer skips sessions still running)."""
    path = tokenizers.resolve(record.steps)
    metrics: Counter[str] = Counter()
    rows = lay_out_rows(record.steps, layout, metrics=metrics).rows
    metrics.update(rows=len(rows), tokens=sum(len(r.prompt_ids) + len(r.response_ids) for r in rows),
                   action_tokens=sum(sum(r.response_mask) for r in rows))
    views = [_row_view(row, tokenizers=tokenizers, path=path) for row in rows]
    return RowsView(session_id=record.id, layout=layout, source="trainer", rows=views,  # type: ignore[arg-type]
                    metrics=dict(metrics), tokenizer=path if tokenizers.get(path) is not None else None)


def _row_view(row: TokenRow, *, tokenizers: Tokenizers, path: str | None) -> RowView:
    prompt, response, mask = row.prompt_ids, row.response_ids, row.response_mask
    texts = tokenizers.pieces(path, [*prompt, *response])
    first = row.segments[0].step_index if row.segments else None
    tokens = [Token(id=i, text=texts[k], mask=0, step=first, kind="prompt") for k, i in enumerate(prompt)]
    owner: list[int | None] = [None] * len(response)
    cursor = 0
    for segment in row.segments:  # feedback before an action belongs to that step's observation
        for pos in range(cursor, segment.end):
            owner[pos] = segment.step_index
        cursor = segment.end
    for pos, token_id in enumerate(response):
        sampled = mask[pos] == 1
        tokens.append(Token(id=token_id, text=texts[len(prompt) + pos], mask=mask[pos], step=owner[pos],
                            logprob=row.old_logprobs[pos] if sampled else None,
                            kind="action" if sampled else "feedback"))
    return RowView(steps=[s.step_index for s in row.segments], prompt_len=len(prompt), n_tokens=len(tokens),
                   n_action=sum(mask), tokens=tokens)
