"""The calculator example's task generators (examples/calculator/calculator.py): train, val and test share no
problem, nor a problem's swapped twin, over the task sets the recipe's configs load."""

from __future__ import annotations

import pytest
from examples.calculator.calculator import (
    EASY_HELD_OUT,
    SPLITS,
    computation,
    easy_problems,
    make_easy_tasks,
    make_tasks,
    problem_split,
)
from examples.calculator.sft_demos import demonstrations
from split_checks import assert_splits_disjoint, config_splits, question_key


def _computation(task: dict) -> list[tuple[int, str, int]]:
    a, op, b = task["question"].removeprefix("What is ").split("?")[0].split()
    return [computation(int(a), op, int(b))]


@pytest.mark.parametrize(("config", "overrides"), [
    ("examples/calculator/train.yaml", []),
    ("examples/calculator/train.yaml", ["data.val_size=96", "data.seed=3"]),  # scripts/warmstart --gpu's 96
    ("examples/calculator/train_gpu.yaml", []),
    ("examples/calculator/estimators/grpo.yaml", []),
])
def test_the_configs_load_train_val_and_test_tasks_that_share_no_problem(config, overrides):
    splits = config_splits(config, overrides)
    assert_splits_disjoint(splits, question_key, _computation)


def test_held_out_problems_are_distinct_and_training_draws_follow_the_old_distribution():
    val, test = make_tasks("val", 96, 1_000_003), make_tasks("test", 96, 2_000_006)
    assert len({t["question"] for t in val}) == len({t["question"] for t in test}) == 96
    with pytest.raises(ValueError, match="there are 101 test problems"):
        make_tasks("test", 102, 0)
    train = make_tasks("train", 2000, 0)
    ops = [t["question"].split()[3] for t in train]
    assert 0.45 < ops.count("+") / len(ops) < 0.55  # +, +, -, *: half of the draws are sums
    for task in val + test + train:
        a, op, b = task["question"].removeprefix("What is ").removesuffix("?").split()
        assert task["answer"] == eval(f"{a} {op} {b}")  # the regex-checked arithmetic of the task itself


def test_a_swapped_twin_lands_in_the_split_of_its_problem():
    assert computation(5, "+", 3) == computation(3, "+", 5) and computation(5, "-", 3) != computation(3, "-", 5)
    for a in range(1, 10):
        for b in range(1, 10):
            assert problem_split(a, "+", b) == problem_split(b, "+", a)
            assert problem_split(a, "*", b) == problem_split(b, "*", a)


def test_easy_tasks_keep_the_recipes_validation_problems_and_carve_test_from_the_old_training_ones():
    sizes = {split: len(easy_problems(split)) for split in SPLITS}
    assert sizes == {"train": 40, "val": EASY_HELD_OUT, "test": 41}  # 13 twins of val problems are in no split
    val = make_easy_tasks("val", 96, 1_000_003)
    # the 32 validation problems the GPU row (docs/results.md row 14) was measured on, in the same order
    assert [t["question"] for t in val[:3]] == ["What is 4 - 4? Reply with only the number.",
                                               "What is 6 - 6? Reply with only the number.",
                                               "What is 9 + 3? Reply with only the number."]
    assert make_easy_tasks("val", 96, 1_000_003) == val  # deterministic
    with pytest.raises(ValueError, match="split must be one of"):
        make_easy_tasks("dev", 1, 0)


def test_demonstrations_are_training_problems():
    demos = demonstrations(64)
    assert all(problem_split(*_computation(d.env.task)[0]) == "train" for d in demos)


def test_make_tasks_the_cpu_job_uses_draws_as_before_minus_held_out_problems():
    questions = [t["question"] for t in make_tasks("train", 4, 0)]
    # before the test split the first four were 13 + 7, 9 * 9, 13 * 5, 12 + 4: 13 + 7 and 13 * 5 are held out now
    assert questions == ["What is 9 * 9?", "What is 12 + 4?", "What is 10 + 3?", "What is 12 - 7?"]
    assert problem_split(13, "+", 7) != "train" and problem_split(13, "*", 5) != "train"
