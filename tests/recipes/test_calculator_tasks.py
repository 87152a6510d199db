"""The calculator example's task generators (examples/calculator/calculator.py)."""

from __future__ import annotations

from examples.calculator.calculator import EASY_VAL_PROBLEMS, make_easy_tasks, make_tasks


def test_easy_tasks_hold_out_problems_that_training_never_sees():
    val = make_easy_tasks("val", 96, 1_000_003)
    train = make_easy_tasks("train", 2048, 0)
    val_questions = {t["question"] for t in val}
    train_questions = {t["question"] for t in train}
    assert len(val_questions) == EASY_VAL_PROBLEMS and len(train_questions) == 126 - EASY_VAL_PROBLEMS
    assert not val_questions & train_questions
    assert make_easy_tasks("val", 96, 1_000_003) == val  # deterministic
    for task in val + train:
        a, op, b = task["question"].removeprefix("What is ").split("?")[0].split()
        assert task["answer"] == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0


def test_make_tasks_the_cpu_job_uses_is_unchanged():
    questions = [t["question"] for t in make_tasks("train", 4, 0)]
    assert questions == ["What is 13 + 7?", "What is 9 * 9?", "What is 13 * 5?", "What is 12 + 4?"]
