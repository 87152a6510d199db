"""The evaluation protocol's numbers against hand counts and brute force (agentr1.trainer.eval_metrics)."""

from __future__ import annotations

import itertools
import random

import pytest

from agentr1.trainer.eval_metrics import (
    TaskResult,
    bootstrap_interval,
    final_answer,
    majority_success,
    mcnemar_exact,
    paired_bootstrap,
    pass_at_k,
    protocol_metrics,
)


def test_pass_at_k_by_hand_and_by_enumerating_every_k_subset():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0 and pass_at_k(4, 1, 1) == 0.25
    rng = random.Random(3)
    for _ in range(40):
        n = rng.randint(1, 9)
        outcomes = [rng.random() < 0.4 for _ in range(n)]
        k = rng.randint(1, n)
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, sum(outcomes), k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 2)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_majority_vote_takes_the_most_common_answer_and_the_earliest_on_ties():
    assert majority_success([False, True, True, False], ["3", "7", "7", None]) == 1.0
    assert majority_success([True, False, False], ["7", "3", "3"]) == 0.0  # right once, outvoted
    assert majority_success([False, True], ["3", "7"]) == 0.0  # a tie: the earliest answer
    assert majority_success([False, False], [None, None]) == 0.0
    assert final_answer("The result is 1,081.", numeric=True) == "1081"
    assert final_answer("  Paris  is it ", numeric=False) == "paris is it"
    assert final_answer("", numeric=True) is None and final_answer("no number", numeric=True) is None


def test_protocol_metrics_names_values_and_intervals():
    results = [
        TaskResult("a", "chains", greedy=True, samples=[True, False, False, False], answers=["1", "2", "2", "3"]),
        TaskResult("b", "chains", greedy=False, samples=[False, False, False, False], answers=["5", "5", None, "6"]),
        TaskResult("c", "chains", greedy=True, samples=[True, True, True, False], answers=["9", "9", "9", "1"]),
    ]
    m = protocol_metrics(results)
    base = "val-core/chains/acc"
    assert m[f"{base}/greedy@1"] == pytest.approx(2 / 3)
    assert m[f"{base}/mean@4"] == pytest.approx((0.25 + 0 + 0.75) / 3)
    assert m[f"{base}/pass@4"] == pytest.approx(2 / 3)
    assert m[f"{base}/maj@4/mean"] == pytest.approx(1 / 3)  # a: "2" wins (wrong); c: "9" (right)
    assert (m[f"{base}/n_tasks"], m[f"{base}/n_samples"]) == (3.0, 12.0)
    for name in ("greedy@1", "mean@4", "pass@4"):
        assert m[f"{base}/{name}/ci_low"] <= m[f"{base}/{name}"] <= m[f"{base}/{name}/ci_high"]
    assert protocol_metrics(results, k=2)[f"{base}/pass@2"] == pytest.approx((0.5 + 0 + 1.0) / 3)
    with pytest.raises(ValueError, match="at least 5 samples"):
        protocol_metrics(results, k=5)


def test_bootstrap_interval_narrows_with_more_tasks_and_is_degenerate_for_constants():
    assert bootstrap_interval([1.0] * 20) == (1.0, 1.0)
    small = bootstrap_interval([0.0, 1.0] * 5)
    large = bootstrap_interval([0.0, 1.0] * 200)
    assert small[1] - small[0] > large[1] - large[0] > 0


def test_mcnemar_on_constructed_cases():
    a = [True] * 10 + [False] * 10
    b = [True] * 20  # B wins all 10 discordant tasks
    test = mcnemar_exact(a, b)
    assert (test.a_only, test.b_only, test.tasks) == (0, 10, 20)
    assert test.p_value == pytest.approx(2 / 2**10)
    assert test.diff == pytest.approx(0.5)
    balanced = mcnemar_exact([True, False] * 10, [False, True] * 10)
    assert balanced.p_value == pytest.approx(1.0) and balanced.diff == 0.0
    assert mcnemar_exact([True] * 5, [True] * 5).p_value == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


def test_paired_bootstrap_separates_a_real_gain_from_noise():
    rng = random.Random(0)
    a = [rng.random() for _ in range(100)]
    better = paired_bootstrap(a, [x + 0.2 for x in a], metric="mean@8")
    assert better.p_value < 0.01 and better.ci_low > 0.19 and better.diff == pytest.approx(0.2)
    noise = paired_bootstrap(a, [x + rng.uniform(-0.3, 0.3) for x in a], metric="mean@8")
    assert noise.p_value > 0.05 and noise.ci_low < 0 < noise.ci_high
    assert paired_bootstrap(a, a, metric="m").p_value == 1.0
