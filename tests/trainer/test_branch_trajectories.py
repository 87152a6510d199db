"""A forked conversation, recorded by a real gateway (uvicorn, SQLite, SmolLM2's tokenizer and renderer behind
the instant backend) from the real openai client, becomes one training row per branch: each branch's own steps
trained on their exact ids, the shared prefix trained once (in the branch that continues it) and only prompt
in the fork, also when the agent goes back and forth between the branches."""

from __future__ import annotations

import httpx
import openai
import pytest

from agentr1.store import SessionRecord
from agentr1.trainer import BatchConfig, build_rows
from agentr1.trainer.algorithms import AdvantageConfig, compute_advantages


def _echo(prompt: str) -> str:
    return "echo: " + prompt.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]


def _forked_session(url: str, *, fork: bool = True, reward: float = 1.0) -> str:
    """Turn 1; turn 2 with two different user messages (two branches from step 0); then turn 3 on the first
    branch, after the fork was sent: steps 0, 1 (branch A), 2 (branch B), 3 (branch A again)."""
    created = httpx.post(f"{url}/sessions", json={"task_id": "t-fork", "group_id": "g-fork"}).json()
    client = openai.OpenAI(base_url=created["base_url"], api_key=created["api_key"], max_retries=0)

    def ask(messages: list[dict]) -> dict:
        reply = client.chat.completions.create(model="policy", messages=messages)
        return reply.choices[0].message.model_dump(exclude_none=True)

    turn1 = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    first = ask(turn1)
    branch_a = [*turn1, first, {"role": "user", "content": "Another one?"}]
    second = ask(branch_a)
    if fork:
        ask([*turn1, first, {"role": "user", "content": "Why that one?"}])
    ask([*branch_a, second, {"role": "user", "content": "And a third?"}])
    httpx.post(f"{url}/sessions/{created['id']}/finish", json={"reward": reward}).raise_for_status()
    return created["id"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, scripted_gateway):
    db = tmp_path_factory.mktemp("branches") / "traces.db"
    with scripted_gateway(db, _echo) as (url, store):
        forked, straight = _forked_session(url), _forked_session(url, fork=False, reward=0.0)
        report = httpx.get(f"{url}/sessions/{forked}").json()
        yield store.get_session(forked), store.get_session(straight), report


def _steps(rows) -> list[list[int]]:
    return [[seg.step_index for seg in row.segments] for row in rows]


def test_the_gateway_stores_two_branches_with_the_right_parent(recorded):
    session, _, report = recorded
    assert [(s.index, s.parent_index, s.drift, s.trainable) for s in session.steps] == \
        [(0, None, False, True), (1, 0, False, True), (2, 0, False, True), (3, 1, False, True)]
    assert report["branches"] == [{"id": 0, "kind": "root", "parent_step": None, "steps": [0, 1, 3]},
                                  {"id": 1, "kind": "fork", "parent_step": 0, "steps": [2]}]


def test_merged_layout_gives_one_row_per_branch_on_the_exact_ids(recorded):
    session: SessionRecord = recorded[0]
    s0, _, s2, s3 = session.steps
    batch = build_rows([session], BatchConfig(layout="merged"))
    assert _steps(batch.rows) == [[0, 1, 3], [2]]
    main, fork = batch.rows
    # each row is its last step's observation + action, token for token
    assert main.prompt_ids + main.response_ids == s3.observation_ids + s3.action_ids
    assert fork.prompt_ids + fork.response_ids == s2.observation_ids + s2.action_ids
    # the fork's row trains step 2's action only: the shared step 0 (and its action) is its prompt
    assert fork.prompt_ids == s2.observation_ids and fork.response_ids == s2.action_ids
    assert fork.response_mask == [1] * len(s2.action_ids) and fork.old_logprobs == s2.action_logprobs
    shared = [*s0.observation_ids, *s0.action_ids]
    assert s2.observation_ids[: len(shared)] == shared
    # every action token of the session is trained exactly once
    trained = sorted((seg.step_index, row.response_ids[seg.start:seg.end]) for row in batch.rows for seg in row.segments
                     if all(row.response_mask[seg.start:seg.end]))
    assert trained == [(s.index, s.action_ids) for s in session.steps]
    assert batch.metrics["action_tokens"] == sum(len(s.action_ids) for s in session.steps)
    assert batch.metrics["new_row_branch"] == 1


def test_per_step_layout_has_every_step_of_both_branches(recorded):
    session: SessionRecord = recorded[0]
    batch = build_rows([session], BatchConfig(layout="per_step"))
    assert _steps(batch.rows) == [[0], [1], [2], [3]]
    for row, step in zip(batch.rows, session.steps, strict=True):
        assert (row.prompt_ids, row.response_ids) == (step.observation_ids, step.action_ids)


def test_both_branches_get_the_session_advantage_in_either_layout(recorded):
    forked, straight, _ = recorded
    by_layout = {}
    for layout in ("merged", "per_step"):
        rows = build_rows([forked, straight], BatchConfig(layout=layout)).rows
        compute_advantages(rows, AdvantageConfig(adv_estimator="grpo"))
        by_layout[layout] = {(row.session_id, seg.step_index): {row.advantages[p] for p in range(seg.start, seg.end)}
                             for row in rows for seg in row.segments}
    assert by_layout["merged"] == by_layout["per_step"]  # the layout changes rows, not what is learned
    advantages = by_layout["merged"]
    assert set(advantages) == {(forked.id, i) for i in range(4)} | {(straight.id, i) for i in range(3)}
    fork_values = {v for (sid, _), values in advantages.items() if sid == forked.id for v in values}
    straight_values = {v for (sid, _), values in advantages.items() if sid == straight.id for v in values}
    assert len(fork_values) == len(straight_values) == 1  # one outcome: the same advantage on every branch's tokens
    fork_value, straight_value = fork_values.pop(), straight_values.pop()
    assert fork_value > 0 and fork_value == pytest.approx(-straight_value)
