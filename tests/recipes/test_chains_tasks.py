"""The arithmetic-chains recipe without a model: held-out chains disjoint from training ones, the
one-operation calculator, the scorer, and the expert's demonstrations (replayed through a real gateway)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from examples.chains.env import ChainEnv, calculate_one, exact_final
from examples.chains.expert import demonstrations, expert_turns
from examples.chains.tasks import (
    chain_keys,
    generate_chains,
    make_demo_tasks,
    make_length_tasks,
    make_retry_tasks,
    make_short_tasks,
    make_tasks,
    split_of,
)
from split_checks import assert_splits_disjoint, config_splits, question_key

from agentr1.trainer.config import JobConfig
from agentr1.trainer.tasks import SPLIT_SEED_OFFSETS, SPLITS, load_tasks

ROOT = Path(__file__).resolve().parents[2]


def _operand_tuple(row: dict) -> list[tuple]:
    """The operands of a chain, with the first pair sorted when its operator is commutative (swapped twins)."""
    (op0, x0), *rest = [tuple(o) for o in row["ops"]]
    first = tuple(sorted((row["start"], x0))) if op0 in "+*" else (row["start"], x0)
    return [(first, op0, *rest)]


def _computations(row: dict) -> set[str]:
    return {f"{min(a, b)}{op}{max(a, b)}" if op in "+*" else f"{a}{op}{b}" for a, op, b, _ in row["steps"]}


def _answer(row: dict) -> list[int]:
    return [row["answer"]]


CHAIN_CONTENT = (question_key, _operand_tuple, _computations, _answer)
GENERATORS = [make_tasks, make_short_tasks, make_demo_tasks, make_retry_tasks, make_length_tasks]


@pytest.mark.parametrize("generator", GENERATORS)
def test_train_val_and_test_chains_share_nothing(generator):
    # the seeds the trainer uses (data.seed + SPLIT_SEED_OFFSETS: 0, 1_000_003, 2_000_006) for data.seed 0-2
    splits = {split: [t for seed in (0, 1, 2) for t in generator(split, size, seed + SPLIT_SEED_OFFSETS[split])]
              for split, size in (("train", 2048), ("val", 128), ("test", 128))}
    assert_splits_disjoint(splits, *CHAIN_CONTENT)
    demo_rows = [d.env.task for d in demonstrations(256)] + [d.env.task for d in demonstrations(256, size="short")]
    for held_out in ("val", "test"):  # the warm start's demonstrations are training chains too
        assert_splits_disjoint({"demos": demo_rows, held_out: splits[held_out]}, *CHAIN_CONTENT)
    for split in SPLITS:
        assert all(split_of(k) == split for t in generate_chains(split, 64, 9) for k in chain_keys(t))


def test_training_chains_are_the_ones_drawn_before_the_test_split():
    # the test split was carved out of the old held-out half (val's), so the training chains, the demonstrations
    # and the results measured on them are unchanged: the first demo training chains as drawn before it
    rows = make_demo_tasks("train", 3, 0)
    assert [r["prompt"][-1]["content"] for r in rows] == [
        "Start with 78. Multiply it by 78, and finally add 43. What is the result?",
        "Start with 44. Multiply it by 57, and finally multiply it by 77. What is the result?",
        "Start with 27. Subtract 1, and finally add 58. What is the result?"]


def test_a_swapped_twin_is_the_same_computation():
    from examples.chains.tasks import Chain, computation_key

    assert computation_key(5, "*", 3) == computation_key(3, "*", 5) == "3*5"
    assert computation_key(5, "+", 3) == computation_key(3, "+", 5)
    assert computation_key(5, "-", 3) != computation_key(3, "-", 5)
    twins = Chain(47, (("*", 23), ("+", 5))), Chain(23, (("*", 47), ("+", 5)))
    assert chain_keys(twins[0]) == chain_keys(twins[1])  # so both land in the same split or neither is drawn


def test_chains_are_generated_by_seed_with_two_to_four_steps():
    assert make_tasks("val", 32, 5) == make_tasks("val", 32, 5)
    assert make_tasks("val", 32, 5) != make_tasks("val", 32, 6)
    rows = make_tasks("train", 300, 0)
    assert {len(t["ops"]) for t in rows} == {2, 3, 4}
    assert len({t["prompt"][-1]["content"] for t in rows}) == 300
    for t in rows:
        value = t["start"]
        for (op, x), (a, op2, b, result) in zip(t["ops"], t["steps"], strict=True):
            assert (a, op2, b) == (value, op, x) and result == eval(f"{a} {op} {b}")
            value = result
        assert value == t["answer"] and value > 0
        assert t["env_kwargs"]["max_steps"] == len(t["ops"]) + 2
    # multi-digit operands: nothing a 135M model does in its head
    assert all(t["start"] >= 100 for t in rows) and max(t["answer"] for t in rows) > 10_000


@pytest.mark.parametrize(("config", "overrides"), [
    ("examples/chains/train.yaml", []),
    ("examples/chains/demo.yaml", []),
    ("examples/chains/teach_gpu.yaml", ["data.train_size=1024"]),  # the retry tasks
    ("examples/chains/teach_gpu.yaml", ["data.generator=examples.chains.tasks:make_length_tasks",
                                        "data.train_size=1024"]),
])
def test_each_chains_config_loads_disjoint_train_val_and_test_tasks(config, overrides):
    splits = config_splits(config, overrides)
    assert len(splits["test"]) == len(splits["val"]) >= 32  # data.test_size defaults to data.val_size
    assert_splits_disjoint(splits, *CHAIN_CONTENT)


def test_generator_errors_are_clear():
    with pytest.raises(ValueError, match="split must be one of"):
        make_tasks("dev", 4, 0)
    with pytest.raises(ValueError, match="too small"):
        generate_chains("val", 500, 0, min_ops=1, max_ops=1, digits=1, max_draws=20_000)


def test_the_calculator_does_one_operation_and_explains_everything_else():
    assert calculate_one("1081 - 318") == "763"
    assert calculate_one(" 47*23 ") == "1081" and calculate_one("47 x 23") == "1081"
    assert calculate_one("1,081 + 2") == "1083"
    assert calculate_one("-5 + 3") == "-2"
    for bad in ("47 * 23 - 318", "(47*23)", "47", "", "abc", "2 ** 10", "1 / 2"):
        assert calculate_one(bad).startswith("error: give one operation"), bad
    assert calculate_one("1" * 13 + " + 1").startswith("error: numbers of at most")


def test_the_scorer_reads_the_last_whole_number():
    assert exact_final("The result is 1,668.", 1668) == 1.0
    assert exact_final("1081 then 763, so 1668", "1668") == 1.0
    assert exact_final("The result is 1667.", 1668) == 0.0
    assert exact_final("no number", 1668) == 0.0


def test_the_expert_solves_every_chain_in_the_environment():
    async def play(row: dict) -> tuple[float, int]:
        env = ChainEnv(row, score_final_step=True)
        await env.reset()
        total, calls = 0.0, 0
        for action in expert_turns(row):
            result = await env.step(action)
            total += result.reward
            calls += len(action.get("tool_calls") or [])
            if result.done:
                break
        return total, calls

    for row in make_tasks("train", 40, 3):
        total, calls = asyncio.run(play(row))
        assert total == 1.0 and calls == len(row["ops"]) >= 2, (row, total)
    turn = expert_turns(make_tasks("train", 1, 0)[0])[0]
    assert json.loads(turn["tool_calls"][0]["function"]["arguments"])["expression"].count(" ") == 2


def test_the_progress_reward_pays_each_new_intermediate_result_once():
    row = make_tasks("train", 1, 5)[0]
    k = len(row["steps"])
    turns = expert_turns(row)

    async def rewards(actions: list[dict]) -> list[float]:
        env = ChainEnv(row, progress_reward=0.5)
        await env.reset()
        return [(await env.step(action)).reward for action in actions]

    wrong = {"content": None, "tool_calls": [{"id": "w", "type": "function", "function": {
        "name": "calculator", "arguments": json.dumps({"expression": "1 + 1"})}}]}
    # the expert's calls each advance the chain; its answer is the outcome's business, not the steps'
    assert asyncio.run(rewards(turns)) == pytest.approx([0.5 / k] * k + [0.0])
    # a wrong call, then the first call twice: paid once, in order
    assert asyncio.run(rewards([wrong, turns[0], turns[0]])) == pytest.approx([0.0, 0.5 / k, 0.0])
    assert asyncio.run(rewards(turns[1:2])) == [0.0]  # the second result before the first: not progress yet


@pytest.mark.slow  # SmolLM2's converted tokenizer and template, a real gateway
def test_demonstrations_replay_through_the_gateway_as_finished_sessions(tmp_path):
    from agentr1.store import TraceStore
    from agentr1.trainer.sft.replay import replay_demonstrations

    demos = demonstrations(3, size="short")
    report = replay_demonstrations(demos, model="smollm2", db=str(tmp_path / "t.db"), run_id="chains-demos")
    assert (report.finished, report.failed) == (3, 0), report.errors
    with TraceStore.open(tmp_path / "t.db") as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions("chains-demos")]
    for session, demo in zip(sessions, demos, strict=True):
        assert len(session.steps) == 3 and sum(r.value for r in session.rewards) == 1.0
        tool_calls = [st.action.get("tool_calls") for st in session.steps]
        assert all(tool_calls[:2]) and not tool_calls[2]
        assert session.steps[1].messages_seen[-1]["content"] == str(demo.env.task["steps"][0][3])


def test_chain_env_names_its_progress_as_the_gigpo_anchor():
    task = make_tasks("train", 1, 7)[0]
    turns = expert_turns(task)  # one correct call per operation, then the answer

    async def anchors(actions):
        env = ChainEnv(task)
        await env.reset()
        seen = [env.anchor()]
        for action in actions:
            await env.step(action)
            seen.append(env.anchor())
        return seen

    n = len(task["steps"])
    assert asyncio.run(anchors(turns)) == [f"progress {k}/{n}" for k in range(n + 1)] + [f"progress {n}/{n}"]
    wrong = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "w", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": "1 + 1"})}}]}
    # a detour through a wrong call leaves the episode where it was: the same state as the expert's
    assert asyncio.run(anchors([turns[0], wrong, *turns[1:]]))[2:3] == ["progress 1/" + str(n)]
    # skipping the first operation reaches no leading result
    assert asyncio.run(anchors(turns[1:2]))[-1] == f"progress 0/{n}"


def test_the_demo_seeds_each_held_out_chain_and_no_training_chain():
    val, train = make_demo_tasks("val", 32, 1_000_003), make_demo_tasks("train", 64, 0)
    test = make_demo_tasks("test", 32, 2_000_006)
    assert [t["env_kwargs"]["sampling"]["seed"] for t in val] == list(range(32))
    assert [t["env_kwargs"]["sampling"]["seed"] for t in test] == list(range(32))
    assert not any("seed" in t["env_kwargs"]["sampling"] for t in train)
    assert all(t["env_kwargs"]["progress_reward"] == 0.5 for t in val + test + train)
    # otherwise the short tasks, chain for chain
    assert [t["prompt"] for t in val] == [t["prompt"] for t in make_short_tasks("val", 32, 1_000_003)]


def test_the_demo_reward_weight_comes_from_data_generator_kwargs():
    demo = Path(__file__).resolve().parents[2] / "examples" / "chains" / "demo.yaml"
    rows = load_tasks(JobConfig.from_yaml(demo, ["data.val_size=4"]).data, "val")
    assert [r["env_kwargs"]["progress_reward"] for r in rows] == [0.0] * 4  # the demo's default: the outcome alone
    weighted = load_tasks(JobConfig.from_yaml(demo, ["data.generator_kwargs.progress_reward=0.5",
                                                     "data.val_size=4"]).data, "val")
    assert [r["env_kwargs"]["progress_reward"] for r in weighted] == [0.5] * 4
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in make_demo_tasks("val", 4, 1_000_003)]

    async def reward_of_the_first_correct_call(row) -> float:
        env = ChainEnv(row, **{k: v for k, v in row["env_kwargs"].items() if k not in ("max_steps", "sampling")})
        await env.reset()
        return (await env.step(expert_turns(row)[0])).reward

    assert asyncio.run(reward_of_the_first_correct_call(rows[0])) == 0.0  # the outcome alone
    assert asyncio.run(reward_of_the_first_correct_call(make_demo_tasks("val", 1, 1_000_003)[0])) > 0.0
    with pytest.raises(ValueError, match="progress_reward must be >= 0"):
        make_demo_tasks("val", 1, 0, progress_reward=-1)


def test_the_demo_training_temperature_applies_to_training_chains_only():
    demo = Path(__file__).resolve().parents[2] / "examples" / "chains" / "demo.yaml"
    job = JobConfig.from_yaml(demo, ["data.generator_kwargs.temperature=0.7", "data.val_size=4", "data.test_size=4"])
    train = load_tasks(job.data, "train")
    assert {r["env_kwargs"]["sampling"]["temperature"] for r in train} == {0.7}
    for split in ("val", "test"):  # held-out chains keep the protocol's sampled evaluation at temperature 1
        held_out = load_tasks(job.data, split)
        assert [r["env_kwargs"]["sampling"]["temperature"] for r in held_out] == [1.0] * 4
    default = load_tasks(JobConfig.from_yaml(demo, ["data.val_size=4"]).data, "train")
    assert {r["env_kwargs"]["sampling"]["temperature"] for r in default} == {1.0}
    with pytest.raises(ValueError, match=r"temperature must be in \(0, 2\]"):
        make_demo_tasks("train", 1, 0, temperature=0)


def test_the_demo_settings_of_each_model_load_and_sample_training_chains_as_the_trainer_expects():
    from examples.chains.demo import MODEL_SETTINGS

    demo = Path(__file__).resolve().parents[2] / "examples" / "chains" / "demo.yaml"
    for model, overrides in MODEL_SETTINGS.items():
        job = JobConfig.from_yaml(demo, [*overrides, "data.val_size=2"])
        temperatures = {r["env_kwargs"]["sampling"]["temperature"] for r in load_tasks(job.data, "train")}
        assert temperatures == {job.actor_rollout_ref.rollout.temperature}, model  # the trainer's sampling check
