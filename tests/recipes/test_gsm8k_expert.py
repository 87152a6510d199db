"""GSM8K + calculator: the held-out val and test problems are disjoint from training by question text, and the
expert replayed from GSM8K's ``<<a*b=c>>`` annotations gets every annotated result from the calculator
and the labelled final answer, on every training problem whose annotations are well-formed."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json

import pytest
from examples.gsm8k.expert import (
    MalformedSolution,
    demonstrations,
    result_matches,
    solution_calls,
    solution_turns,
)
from examples.gsm8k.task import ground_truth
from examples.gsm8k.tool_task import (
    DATA,
    MAX_STEPS,
    VAL_PROBLEMS,
    ScoredCalculatorEnv,
    load_split,
    make_tasks,
    normalized,
    train_row,
)
from split_checks import assert_splits_disjoint, config_splits, question_key

OFFICIAL_TRAIN_SHA256 = "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"  # ../shared/data/gsm8k/README.md
OFFICIAL_TEST_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
WELL_FORMED = 7378  # of GSM8K's 7,473 training problems (the other 95 have no annotation at all)


def test_the_training_file_is_gsm8ks_official_train_split():
    with gzip.open(DATA / "train_full.jsonl.gz", "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == OFFICIAL_TRAIN_SHA256


def test_val_and_test_are_gsm8ks_official_test_split_in_two_index_ranges():
    with gzip.open(DATA / "test_rest.jsonl.gz", "rb") as fh:
        official = (DATA / "test.jsonl").read_bytes() + fh.read()
    assert hashlib.sha256(official).hexdigest() == OFFICIAL_TEST_SHA256
    assert (len(load_split("val")), len(load_split("test"))) == (VAL_PROBLEMS, 1119)


def _question(row: dict) -> list[str]:
    return [normalized(row["extra_info"]["question"])]


@pytest.mark.parametrize("config", ["examples/gsm8k/tool_train.yaml", "examples/gsm8k/tool_train_gpu.yaml",
                                    "examples/gsm8k/train.yaml"])
def test_the_configs_load_train_val_and_test_rows_that_share_no_question(config):
    splits = config_splits(config, ["data.train_size=8000"])  # more than the set: it cycles, still training rows
    assert_splits_disjoint(splits, question_key, _question)


def test_held_out_rows_are_in_file_order_whatever_the_seed():
    train, val, test = load_split("train"), load_split("val"), load_split("test")
    assert len(train) == 7473  # no held-out question had to be dropped from training
    rows = make_tasks("train", 8000, 3)
    assert len({r["id"] for r in rows}) == 8000 and len({_question(r)[0] for r in rows}) == 7473
    held_out = make_tasks("val", 200, 1_000_003) + make_tasks("test", 1119, 2_000_006)
    assert [r["id"] for r in held_out] == [f"test-{i}" for i in range(1319)]  # ids are official test indices
    assert [_question(r)[0] for r in held_out] == [normalized(r["question"]) for r in val + test]
    assert make_tasks("test", 5, 7) == held_out[200:205]  # the held-out sets do not depend on the seed
    with pytest.raises(ValueError, match="there are 200 val problems"):
        make_tasks("val", 201, 0)
    with pytest.raises(ValueError, match="split must be"):
        make_tasks("dev", 1, 0)


def test_the_rows_are_the_recipes_rows_with_room_for_every_call():
    row = make_tasks("train", 1, 0)[0]
    assert row["agent_name"] == "tool_env" and row["env_kwargs"]["tools"] == ["examples.gsm8k.task:Calculator"]
    assert row["env_kwargs"]["max_steps"] == MAX_STEPS and row["reward_model"]["scorer"] == "examples.gsm8k.task:exact_match"
    most = max(len(solution_calls(r["answer"])[0]) for r in load_split("train") if "<<" in r["answer"])
    assert most + 1 <= MAX_STEPS


def test_the_expert_turns_of_a_solution():
    solution = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
                "altogether in April and May.\n#### 72")
    first, second, last = solution_turns(solution)
    assert first["content"] == "Natalia sold 48/2" and json.loads(first["tool_calls"][0]["function"]["arguments"]) == {
        "expression": "48/2"}
    assert second["content"] == "24 clips in May.\nNatalia sold 48+24"
    assert last == {"role": "assistant", "content": "72 clips altogether in April and May.\n#### 72"}
    assert result_matches("3.333333", "3.33") and result_matches("24", "24.00") and not result_matches("3.4", "3")
    with pytest.raises(MalformedSolution, match="no <<"):
        solution_turns("It is 4.\n#### 4")
    with pytest.raises(MalformedSolution, match="the annotation says '5'"):
        solution_turns("2+2 = <<2+2=5>>5\n#### 5")
    with pytest.raises(MalformedSolution, match="not expression=result"):
        solution_turns("<<2+2>>4\n#### 4")
    with pytest.raises(MalformedSolution, match="does not end with"):
        solution_turns("2+2 = <<2+2=4>>4\n#### 5 apples")


async def _replay_in_env(index: int, turns: list[dict]) -> tuple[list[str], float, bool]:
    """The expert's turns through the environment (its real tool path): the tool answers, the last reward."""
    env = ScoredCalculatorEnv({**train_row(index), "answer": ground_truth(load_split("train")[index]["answer"])})
    await env.reset()
    answers, result = [], None
    for turn in turns:
        result = await env.step(turn)
        answers += [call["content"] for call in result.info.get("tool_calls", [])]
    assert result is not None
    return answers, result.reward, result.done


def test_the_expert_on_every_well_formed_training_problem():
    async def check_all() -> int:
        well_formed = 0
        for i, record in enumerate(load_split("train")):
            try:
                turns = solution_turns(record["answer"])
            except MalformedSolution:
                continue
            well_formed += 1
            answers, reward, done = await _replay_in_env(i, turns)
            calls, _ = solution_calls(record["answer"])
            assert len(answers) == len(calls) and all(
                result_matches(a, c.annotated) for a, c in zip(answers, calls, strict=True)), (i, answers, calls)
            assert (reward, done) == (1.0, True), (i, turns[-1])  # the final answer is the label
        return well_formed

    assert asyncio.run(check_all()) == WELL_FORMED


def test_demonstrations_replay_through_a_real_gateway(tmp_path, tiny_model_path):
    from agentr1.store import TraceStore
    from agentr1.trainer.sft import SFTData, select_demonstrations
    from agentr1.trainer.sft.data import build_sft_rows
    from agentr1.trainer.sft.replay import replay_demonstrations

    demos = demonstrations(6, seed=0)
    assert len(demos) == 6 and not {normalized(d.metadata["question"]) for d in demos} & {
        normalized(r["question"]) for r in load_split("val") + load_split("test")}
    db = str(tmp_path / "traces.db")
    report = replay_demonstrations(demos, model=tiny_model_path, db=db, run_id="gsm8k-demos")
    assert (report.finished, report.failed) == (6, 0), report.errors
    with TraceStore.open(db) as store:
        data = SFTData(db=db, run_ids=["gsm8k-demos"], min_reward=1.0)
        selection = select_demonstrations(store, data)
        assert len(selection.sessions) == 6
        # one merged row per demonstration (the history only grows), loss on every assistant token only
        rows = build_sft_rows(selection, data).rows
        assert len(rows) == 6 and sum(sum(r.response_mask) for r in rows) == sum(
            len(st.action_ids) for s in selection.sessions for st in s.steps)
        for summary in store.list_sessions("gsm8k-demos"):
            session = store.get_session(summary.id)
            demo = next(d for d in demos if d.task_id == session.task_id)
            calls, _ = solution_calls(next(r["answer"] for r in load_split("train")
                                           if normalized(r["question"]) == normalized(demo.metadata["question"])))
            parsed = [c for s in session.steps for c in (s.action.get("tool_calls") or [])]
            # the gateway parsed back exactly the expert's calls from the policy's tokens
            assert [json.loads(c["function"]["arguments"])["expression"] for c in parsed] == [c.expression for c in calls]
            tool_answers = [m["content"] for s in session.steps for m in (s.feedback_messages or []) if m.get("role") == "tool"]
            assert len(tool_answers) == len(calls) and all(
                result_matches(a, c.annotated) for a, c in zip(tool_answers, calls, strict=True))


@pytest.mark.parametrize(("config", "held_out"), [("tool_train.yaml", 16), ("tool_train_gpu.yaml", 200)])
def test_the_configs_load_with_held_out_test_problems(config, held_out):
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.sft.config import SFTConfig
    from agentr1.trainer.tasks import load_tasks

    job = JobConfig.from_yaml(DATA.parent / config)
    val = load_tasks(job.data, "val")
    assert len(val) == held_out and all(r["extra_info"]["split"] == "test" for r in val)
    assert len(load_tasks(job.data, "train")) == 7473
    assert SFTConfig.from_yaml(DATA.parent / "tool_sft.yaml").data.run_ids == ["gsm8k-demos"]
