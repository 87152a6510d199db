"""The trainer's rows did not change when the row building moved below the apps (issue 57).

``data/rows_before_issue57.json`` holds the batches that ``build_rows`` made, before the move (commit 920025b's
``trainer/batch.py``), from the sessions of :func:`stored_sessions.write_varied_sessions` read back from a real
store, under five batch configurations: every field of every row, and the batch metrics. The test builds them again
with today's code and compares, field by field.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from stored_sessions import write_varied_sessions

from agentr1.store import TraceStore
from agentr1.trainer import BatchConfig, build_rows

BEFORE = Path(__file__).parent / "data" / "rows_before_issue57.json"
CONFIGS = {
    "per_step": {"layout": "per_step"},
    "merged": {"layout": "merged"},
    "merged_all_statuses": {"layout": "merged", "skip_statuses": ()},
    "merged_split_at_12": {"layout": "merged", "max_length": 12, "truncation": "split"},
    "per_step_drop_at_10": {"layout": "per_step", "max_length": 10, "truncation": "drop"},
}


def batches_of(store: TraceStore) -> dict[str, Any]:
    """{config name: {"rows": [each row's fields], "metrics": ...}} for the stored sessions."""
    sessions = store.get_sessions(write_varied_sessions(store))
    out = {}
    for name, options in CONFIGS.items():
        batch = build_rows(sessions, BatchConfig(**options))
        out[name] = {"rows": [dataclasses.asdict(row) for row in batch.rows], "metrics": dict(sorted(batch.metrics.items()))}
    return json.loads(json.dumps(out))  # tuples as lists, as the file has them


def test_the_rows_of_stored_sessions_are_those_built_before(tmp_path: Path) -> None:
    with TraceStore.open(f"sqlite:///{tmp_path / 'rows.db'}") as store:
        now = batches_of(store)
    before = json.loads(BEFORE.read_text())
    assert now.keys() == before.keys()
    for name in CONFIGS:
        assert now[name]["metrics"] == before[name]["metrics"], name
        assert len(now[name]["rows"]) == len(before[name]["rows"]), name
        for k, (row, old) in enumerate(zip(now[name]["rows"], before[name]["rows"], strict=True)):
            assert row == old, f"{name} row {k}"
    # the sessions exercise every rule: each kind of new row, skip and truncation occurs
    metrics = before["merged"]["metrics"] | before["merged_split_at_12"]["metrics"]
    for key in ("new_row_context_rewrite", "new_row_drift", "new_row_branch", "new_row_truncated",
                "superseded_steps", "steps_skipped_untrainable", "steps_skipped_empty_action",
                "steps_skipped_bad_logprobs", "steps_without_logprobs", "steps_action_truncated",
                "steps_dropped_too_long", "steps_env_anchor", "rewards_relocated", "sessions_skipped_status"):
        assert metrics.get(key, 0) > 0, key
    assert all(math.isfinite(lp) for b in before.values() for r in b["rows"] for lp in r["old_logprobs"])


def test_the_viewer_shows_the_trainers_rows(tmp_path: Path) -> None:
    """Every stored session, in both layouts: the rows the viewer shows are the trainer's, token for token, with the
    same masks, log-probabilities and steps (the viewer shows sessions of every status; the trainer is asked so)."""
    from agentr1.viewer.tokens import Tokenizers, session_rows

    with TraceStore.open(f"sqlite:///{tmp_path / 'rows.db'}") as store:
        sessions = store.get_sessions(write_varied_sessions(store))
    tokenizers = Tokenizers()
    for layout in ("merged", "per_step"):
        for session in sessions:
            trained = build_rows([session], BatchConfig(layout=layout, skip_statuses=()))
            shown = session_rows(session, layout, tokenizers)
            assert [([t.id for t in r.tokens], [t.mask for t in r.tokens], r.steps, r.prompt_len) for r in shown.rows] \
                == [([*r.prompt_ids, *r.response_ids], [0] * len(r.prompt_ids) + r.response_mask,
                     [s.step_index for s in r.segments], len(r.prompt_ids)) for r in trained.rows], (layout, session.id)
            assert [[t.logprob for t in r.tokens[r.prompt_len:] if t.mask] for r in shown.rows] \
                == [[lp for lp, m in zip(r.old_logprobs, r.response_mask, strict=True) if m] for r in trained.rows]
            assert {k: v for k, v in shown.metrics.items() if k.startswith("new_row_")} \
                == {k: v for k, v in trained.metrics.items() if k.startswith("new_row_")}
