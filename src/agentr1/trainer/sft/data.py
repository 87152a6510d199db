"""Selected sessions -> SFT rows: the exact stored ids, loss only on the actions.

Rows come from :func:`agentr1.trainer.batch.build_rows`, the RL batch builder, so a
demonstration is trained on exactly the ids the gateway recorded (no re-tokenisation):
``response_mask`` is 1 on action tokens and 0 on the observation and on the feedback between
actions (tool results, the next user turn, template glue), and verl's ``sft_loss`` reads only
masked tokens.

Steps of an external model (a teacher behind LiteLLM) have text and no ids. With
``text_steps: render`` they are rendered here, once, with the policy's template: the observation
is the rendering of the messages the teacher saw, the action the policy's tokens for the
teacher's message (:func:`~agentr1.core.rendering.turns.assistant_turn_ids`). Rows holding such
steps are marked ``rendered_from_text`` in :class:`SFTRows` and in the data manifest
(``sft_data.jsonl``), since their ids are a rendering, not what a model sampled.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.store import SessionRecord, StepRecord
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.rows import TrainRow
from agentr1.trainer.sft.config import SFTData
from agentr1.trainer.sft.selection import Selection

__all__ = ["SFTRows", "build_sft_rows", "render_text_steps"]


@dataclass
class SFTRows:
    rows: list[TrainRow]
    rendered_from_text: list[bool]  # per row: holds steps rendered from an external model's text
    metrics: dict[str, int] = field(default_factory=dict)
    returns: dict[str, float | None] = field(default_factory=dict)  # session id -> return, from the selection

    def write_manifest(self, path: Path) -> Path:
        """One JSON line per row: where it came from and what it trains on."""
        with path.open("w", encoding="utf-8") as fh:
            for row, rendered in zip(self.rows, self.rendered_from_text, strict=True):
                fh.write(json.dumps({
                    "session_id": row.session_id, "task_id": row.task_id, "group_id": row.group_id,
                    "steps": [seg.step_index for seg in row.segments], "rendered_from_text": rendered,
                    "tokens": row.length, "action_tokens": sum(row.response_mask),
                    "return": self.returns.get(row.session_id)}) + "\n")
        return path


def _text_message(step: StepRecord) -> dict[str, Any]:
    message = step.action.get("message")
    if isinstance(message, dict):
        return {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")} | {"role": "assistant"}
    return {"role": "assistant", "content": step.action.get("content"), "tool_calls": step.action.get("tool_calls")}


def render_text_steps(session: SessionRecord, renderer: Any, counts: Counter[str]) -> tuple[SessionRecord, set[int]]:
    """``session`` with its text-only steps given the policy's ids; returns the indices rendered."""
    # lazy: rendering loads the tokenizers' stack, only when this runs
    from agentr1.core.rendering import RenderError, assistant_turn_ids

    rendered: set[int] = set()
    steps = []
    for step in session.steps:
        if step.trainable or step.action_ids:
            steps.append(step)
            continue
        message = _text_message(step)
        try:
            observation = renderer.render(step.messages_seen, step.tools, add_generation_prompt=True)
            action = assistant_turn_ids(renderer, message, step.messages_seen, step.tools)
        except RenderError as exc:
            raise ValueError(f"step {step.index} of session {session.id}: cannot render its text for the "
                             f"policy's template: {exc}") from exc
        steps.append(dataclasses.replace(step, observation_ids=observation, action_ids=action,
                                         action_logprobs=None, trainable=True))
        rendered.add(step.index)
        counts["steps_rendered_from_text"] += 1
    return dataclasses.replace(session, steps=steps), rendered


def build_sft_rows(selection: Selection, data: SFTData, renderer: Any = None) -> SFTRows:
    """Rows of the selected sessions (``renderer``: the policy's, needed for ``text_steps: render``)."""
    counts: Counter[str] = Counter()
    sessions = selection.sessions
    rendered: dict[str, set[int]] = {}
    if data.text_steps == "render":
        if renderer is None:
            raise ValueError("text_steps: render needs the policy's renderer")
        sessions = []
        for session in selection.sessions:
            session, indices = render_text_steps(session, renderer, counts)
            sessions.append(session)
            rendered[session.id] = indices
    # sessions' statuses were chosen by the selection; truncation follows data.truncation
    batch = build_rows(sessions, BatchConfig(layout=data.layout, max_length=data.max_length,
                                             truncation=data.truncation, skip_statuses=()))
    flags = [any(seg.step_index in rendered.get(row.session_id, ()) for seg in row.segments) for row in batch.rows]
    counts.update(batch.metrics)
    counts["rows_rendered_from_text"] = sum(flags)
    return SFTRows(batch.rows, flags, dict(counts), dict(selection.returns))
