"""A step's fields are declared once (agentr1.store.StepRecord): the steps table, the row mapping and
the viewer's StepView follow it."""

from __future__ import annotations

import dataclasses

from agentr1.store import StepRecord
from agentr1.store.history import STORE_ONLY_COLUMNS
from agentr1.store.records import STEP_COLUMNS
from agentr1.store.schema import StepRow


def test_the_steps_table_has_exactly_the_records_stored_fields():
    columns = {c.name for c in StepRow.__table__.columns} - {"id"}
    assert columns == set(STEP_COLUMNS) | set(STORE_ONLY_COLUMNS)  # shared_history: the store's own (history.py)
    read_side = {f.name for f in dataclasses.fields(StepRecord)} - set(STEP_COLUMNS)
    assert read_side == {"reward", "superseded_by"}


def test_row_values_and_from_row_round_trip_every_stored_field():
    step = StepRecord("s", 3, [1, 2, 3], [4, 5], [-0.5, -0.25], messages_sent=[{"role": "user", "content": "hi"}],
                      messages_seen=[{"role": "user", "content": "hi"}], tools=[{"type": "function"}],
                      sampling={"temperature": 1.0}, action={"content": "ok"}, finish_reason="stop",
                      feedback_messages=[{"role": "tool", "content": "1"}], feedback_ids=[7, 8], policy_version=2,
                      backend="local", model="m", trainable=False, parent_index=1, drift=True, retry_of=[2],
                      latency_ms=1.5)
    values = step.row_values()
    assert set(values) == set(STEP_COLUMNS) and isinstance(values["observation_ids"], bytes)
    back = StepRecord.from_row(type("Row", (), values)(), reward=0.5)
    assert back == dataclasses.replace(step, created_at=values["created_at"], reward=0.5)
    empty = dict(values, observation_ids=None, action_ids=None, action_logprobs=None, feedback_ids=None)
    back = StepRecord.from_row(type("Row", (), empty)())
    assert (back.observation_ids, back.action_ids, back.action_logprobs, back.feedback_ids) == ([], [], None, None)


def test_the_viewer_step_view_takes_its_step_fields_from_the_record():
    from agentr1.viewer.schemas import SHOWN_STEP_FIELDS, StepView, step_fields

    hints = {f.name: f.type for f in dataclasses.fields(StepRecord)}
    assert set(SHOWN_STEP_FIELDS) <= set(hints) and set(SHOWN_STEP_FIELDS) <= set(StepView.model_fields)
    view = StepView(**step_fields(StepRecord("s", 0, [1], [2], sampling={"top_p": 0.9})))
    assert view.sampling == {"top_p": 0.9} and view.messages_sent == [] and view.reward is None
