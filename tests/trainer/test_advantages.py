"""Advantage estimators: hand-computed examples, parity with verl's own functions, degenerate inputs."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

from agentr1.store.records import SessionRecord, StepRecord
from agentr1.trainer.algorithms import (
    AdvantageConfig,
    compute_advantages,
    get_adv_estimator,
    list_adv_estimators,
    register_adv_est,
)
from agentr1.trainer.algorithms.registry import ESTIMATORS as ESTIMATOR_REGISTRY
from agentr1.trainer.batch import BatchConfig, build_rows, metadata_anchor
from agentr1.trainer.rows import Segment, TrainRow

ALL = ["gae", "gigpo", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo", "steppo"]
VERL = ["gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo"]
NEEDS_VALUES = {"gae", "steppo"}


# -- fixtures: hand-built traces ------------------------------------------------------------------

def trajectory(sid: str, group: str, step_rewards: list[float], action_lens: list[int] | None = None, *,
               outcome: float | None = None, prompt: list[int] | None = None, seed: int = 0) -> SessionRecord:
    """An append-only trajectory; ``step_rewards[t]`` is stored as step t's (process) reward."""
    lens = action_lens or [2] * len(step_rewards)
    rng = random.Random(f"{sid}-{seed}")
    obs, steps = list(prompt or [1, 2, 3]), []
    for i, (reward, n) in enumerate(zip(step_rewards, lens, strict=True)):
        action = [rng.randrange(100, 200) for _ in range(n)]
        steps.append(StepRecord(sid, i, list(obs), action, [-0.5] * n, parent_index=i - 1 if i else None,
                                reward=reward))
        obs = obs + action + [rng.randrange(300, 400) for _ in range(rng.randrange(1, 4))]
    return SessionRecord(sid, group_id=group, status="finished", reward=outcome, steps=steps)


def rows_of(sessions: list[SessionRecord], layout: str = "per_step", **kw) -> list[TrainRow]:
    return build_rows(sessions, BatchConfig(layout=layout, **kw)).rows


def set_values(rows: list[TrainRow], value_of) -> None:
    """Critic values per action token: ``value_of(session, step, offset)``; garbage on feedback tokens."""
    for row in rows:
        row.values = [99.0] * len(row.response_ids)
        for seg in row.segments:
            for p in range(seg.start, seg.end):
                row.values[p] = value_of(row.session_id, seg.step_index, p - seg.start)


def per_token(rows: list[TrainRow], field: str = "advantages") -> dict[tuple[str, int, int], float]:
    """(session, step, offset in the action) -> value, whatever the layout."""
    out = {}
    for row in rows:
        values = getattr(row, field)
        assert len(values) == len(row.response_ids)
        for p, m in enumerate(row.response_mask):
            if not m:
                assert values[p] == 0.0  # nothing leaks onto prompt / feedback tokens
        for seg in row.segments:
            for p in range(seg.start, seg.end):
                out[(row.session_id, seg.step_index, p - seg.start)] = values[p]
    return out


def per_step(rows: list[TrainRow], field: str = "advantages") -> dict[tuple[str, int], list[float]]:
    out: dict[tuple[str, int], list[float]] = {}
    for (sid, step, _), v in sorted(per_token(rows, field).items()):
        out.setdefault((sid, step), []).append(v)
    return out


def padded(rows: list[TrainRow], field: str = "token_rewards") -> torch.Tensor:
    width = max(len(r.response_ids) for r in rows)
    return torch.tensor([getattr(r, field) + [0] * (width - len(r.response_ids)) for r in rows],
                        dtype=torch.float64)


def call_verl(name: str, rows: list[TrainRow], cfg: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's own function, called directly on the rows as they are (right-padded)."""
    rewards, mask = padded(rows), padded(rows, "response_mask")
    index = np.array([r.group_id for r in rows], dtype=object)
    algo = AlgoConfig(gamma=cfg.gamma, lam=cfg.lam)
    if name == "grpo":
        return core_algos.compute_grpo_outcome_advantage(rewards, mask, index, cfg.epsilon,
                                                         cfg.norm_adv_by_std_in_grpo)
    if name == "rloo":
        return core_algos.compute_rloo_outcome_advantage(rewards, mask, index, cfg.epsilon)
    if name == "reinforce_plus_plus":
        return core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=algo)
    if name == "reinforce_plus_plus_baseline":
        return core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, index, cfg.epsilon,
                                                                                  config=algo)
    assert name == "gae"
    return core_algos.compute_gae_advantage_return(rewards, padded(rows, "values"), mask, cfg.gamma, cfg.lam)


def whiten(xs: list[float]) -> list[float]:
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


# -- hand-computed examples ---------------------------------------------------------------------

def test_grpo_by_hand_every_step_gets_the_trajectory_advantage():
    sessions = [
        trajectory("a", "g", [0.0, 0.0], outcome=1.0),
        trajectory("b", "g", [0.0, 0.0], outcome=0.0),
        trajectory("c", "g", [0.5, 0.5, 0.0]),  # process rewards only: return 1
        trajectory("d", "g", [0.0], outcome=0.0),
        trajectory("e", "h", [0.0, 2.0]),  # alone in its group
    ]
    rows = rows_of(sessions)
    compute_advantages(rows, AdvantageConfig("grpo"))
    std = math.sqrt(1 / 3)  # returns 1, 0, 1, 0
    up, down = 0.5 / (std + 1e-6), -0.5 / (std + 1e-6)
    expected = {"a": up, "b": down, "c": up, "d": down, "e": 2.0 / (1 + 1e-6)}  # verl: a lone member keeps R
    for (sid, _), values in per_step(rows).items():
        assert values == pytest.approx([expected[sid]] * len(values), abs=1e-6)
    # rows of one session share the advantage, and it equals verl's on the trajectory's tokens
    assert len({tuple(r.advantages) for r in rows if r.session_id == "a"}) == 1


def test_an_advantage_floor_raises_what_is_below_it_and_only_on_action_tokens():
    """``advantage_floor`` 0.0 keeps what beat the group's baseline and zeroes the rest (rejection
    sampling on-policy); a negative floor clips; None leaves the estimator's values."""
    sessions = [trajectory("a", "g", [0.0, 0.0], outcome=1.0), trajectory("b", "g", [0.0, 0.0], outcome=0.0),
                trajectory("c", "g", [0.0], outcome=0.0)]
    plain = rows_of(sessions)
    compute_advantages(plain, AdvantageConfig("grpo"))
    floored = rows_of(sessions)
    metrics = compute_advantages(floored, AdvantageConfig("grpo", advantage_floor=0.0))
    clipped = rows_of(sessions)
    compute_advantages(clipped, AdvantageConfig("grpo", advantage_floor=-0.3))
    before, after, clip = per_token(plain), per_token(floored), per_token(clipped)  # (also: 0 off action tokens)
    assert before[("a", 0, 0)] > 0 > -0.3 > before[("b", 0, 0)] == before[("c", 0, 0)]
    assert all(after[k] == (v if v > 0 else 0.0) for k, v in before.items())
    assert all(clip[k] == max(v, -0.3) for k, v in before.items())
    assert metrics["adv/floored_tokens"] == sum(v < 0 for v in before.values()) == 6  # b's 4 tokens, c's 2
    assert metrics["adv/mean"] == pytest.approx(sum(before.values()) / len(before))  # reported as estimated


def test_rloo_by_hand():
    rows = rows_of([trajectory("a", "g", [0.0, 1.0]), trajectory("b", "g", [0.0]),
                    trajectory("c", "g", [0.25, 0.25])])
    compute_advantages(rows, AdvantageConfig("rloo"))
    # returns 1, 0, 0.5; mean 0.5; A_i = (R_i - mean) * n / (n - 1)
    got = {sid: vals[0] for (sid, _), vals in per_step(rows).items()}
    assert got == pytest.approx({"a": 0.75, "b": -0.75, "c": 0.0}, abs=1e-6)


def test_reinforce_plus_plus_by_hand_discounts_over_action_tokens_only():
    rows = rows_of([trajectory("a", "g", [0.5, 1.0])], layout="merged")  # feedback tokens between the steps
    compute_advantages(rows, AdvantageConfig("reinforce_plus_plus", gamma=0.5))
    returns = [0.375, 0.75, 0.5, 1.0]  # 1 | .5*1 | .5 + .5*.5 | .5*.75, right to left
    assert [v for vs in per_step(rows, "returns").values() for v in vs] == pytest.approx(returns)
    assert [v for vs in per_step(rows).values() for v in vs] == pytest.approx(whiten(returns), abs=1e-5)


def test_reinforce_plus_plus_baseline_by_hand():
    rows = rows_of([trajectory("a", "g", [1.0]), trajectory("b", "g", [0.0])])
    compute_advantages(rows, AdvantageConfig("reinforce_plus_plus_baseline"))
    s3 = math.sqrt(3) / 2  # +-0.5 on four tokens, whitened with the unbiased std sqrt(1/3)
    assert per_step(rows) == {("a", 0): pytest.approx([s3, s3], abs=1e-5),
                              ("b", 0): pytest.approx([-s3, -s3], abs=1e-5)}


@pytest.mark.parametrize("layout", ["per_step", "merged"])
def test_gae_by_hand_runs_across_steps(layout):
    rows = rows_of([trajectory("a", "g", [0.0, 1.0], [2, 1])], layout=layout)
    set_values(rows, lambda sid, step, k: {(0, 0): 0.2, (0, 1): 0.4, (1, 0): 0.6}[(step, k)])
    compute_advantages(rows, AdvantageConfig("gae", gamma=1.0, lam=1.0))
    # gamma = lam = 1: A_t = (sum of later rewards) - V_t = 1 - V_t -> 0.8, 0.6, 0.4; returns 1
    assert per_step(rows, "returns") == {("a", 0): pytest.approx([1, 1]), ("a", 1): pytest.approx([1])}
    assert per_step(rows) == {("a", 0): pytest.approx([1, 0], abs=1e-5), ("a", 1): pytest.approx([-1], abs=1e-5)}


def test_steppo_by_hand_one_value_per_step():
    rows = rows_of([trajectory("a", "g", [0.0, 1.0], [3, 2])], layout="merged")
    # V(o_0) = 0.5, V(o_1) = 0.8 at each step's first action token; the other values must not matter
    set_values(rows, lambda sid, step, k: (0.5 if step == 0 else 0.8) if k == 0 else -7.0)
    cfg = AdvantageConfig("steppo", gamma=0.9, lam=0.95, steppo_norm_adv=False)
    compute_advantages(rows, cfg)
    a1 = 1.0 + 0.0 - 0.8  # delta_1 = r_1 + gamma * 0 - V_1
    a0 = (0.0 + 0.9 * 0.8 - 0.5) + 0.9 * 0.95 * a1
    assert per_step(rows) == {("a", 0): pytest.approx([a0] * 3), ("a", 1): pytest.approx([a1] * 2)}
    assert per_step(rows, "returns") == {("a", 0): pytest.approx([a0 + 0.5] * 3), ("a", 1): pytest.approx([1.0] * 2)}
    compute_advantages(rows, AdvantageConfig("steppo", gamma=0.9, lam=0.95))  # whitened over steps, not tokens
    h = 1 / math.sqrt(2)
    assert per_step(rows) == {("a", 0): pytest.approx([h] * 3, abs=1e-4), ("a", 1): pytest.approx([-h] * 2, abs=1e-4)}


def test_gigpo_by_hand_with_environment_anchors():
    a = trajectory("A", "g", [0.0, 0.0], outcome=1.0)
    b = trajectory("B", "g", [0.0, 0.0, 0.0], outcome=0.0)
    a.metadata["anchors"] = {"0": "room X", "1": "room Y"}
    b.metadata["anchors"] = {"0": "room  X", "1": "room Z", "2": "room Y"}  # whitespace is normalised
    rows = rows_of([a, b], anchor_fn=metadata_anchor)
    compute_advantages(rows, AdvantageConfig("gigpo", gamma=0.5, step_advantage_w=1.0, norm_adv_by_std_in_grpo=False))
    # episode: returns 1, 0 -> +-0.5. step groups: X {A0: G=.5, B0: G=0} -> +-.25; Y {A1: 1, B2: 0} -> +-.5;
    # Z {B1} alone -> 0
    got = {k: v[0] for k, v in per_step(rows).items()}
    assert got == pytest.approx({("A", 0): 0.75, ("A", 1): 1.0, ("B", 0): -0.75, ("B", 1): -0.5, ("B", 2): -1.0})
    compute_advantages(rows, AdvantageConfig("gigpo", gamma=0.5, step_advantage_w=0.0))
    episode = core_algos.compute_grpo_outcome_advantage(torch.tensor([[1.0], [0.0]]), torch.ones(2, 1),
                                                        np.array(["g", "g"], dtype=object))[0][:, 0].tolist()
    got = {k: v[0] for k, v in per_step(rows).items()}
    assert got == pytest.approx({("A", 0): episode[0], ("A", 1): episode[0], ("B", 0): episode[1],
                                 ("B", 1): episode[1], ("B", 2): episode[1]})


def test_gigpo_default_anchors_group_identical_observations():
    prompt = [5, 6, 7]  # the task prompt: every trajectory of the group starts in the same state
    sessions = [trajectory(s, "g", [0.0, r], prompt=prompt) for s, r in [("a", 1.0), ("b", 0.0), ("c", 0.0)]]
    rows = rows_of(sessions)
    compute_advantages(rows, AdvantageConfig("gigpo", gamma=1.0, norm_adv_by_std_in_grpo=False))
    # episode: 1, 0, 0 -> 2/3, -1/3, -1/3; step 0 shares the anchor (same ids) -> the same again; step 1 alone -> 0
    got = {k: v[0] for k, v in per_step(rows).items()}
    assert got == pytest.approx({("a", 0): 4 / 3, ("a", 1): 2 / 3, ("b", 0): -2 / 3, ("b", 1): -1 / 3,
                                 ("c", 0): -2 / 3, ("c", 1): -1 / 3})


# -- parity with verl's functions called directly -----------------------------------------------

def random_sessions(seed: int, *, steps: tuple[int, int] = (1, 4)) -> list[SessionRecord]:
    rng = random.Random(seed)
    sessions = []
    for g in range(3):
        for k in range(rng.randrange(1, 5)):
            n = rng.randrange(*steps)
            rewards = [rng.choice([0.0, 0.0, 0.5, 1.0, -0.25]) for _ in range(n)]
            sessions.append(trajectory(f"s{g}{k}", f"g{g}", rewards, [rng.randrange(1, 6) for _ in range(n)],
                                       outcome=rng.choice([None, 0.0, 1.0]), prompt=[7, 7, g], seed=seed))
    return sessions


def random_values(sid: str, step: int, k: int) -> float:
    return random.Random(f"{sid}/{step}/{k}").uniform(-1, 1)


@pytest.mark.parametrize("name", VERL)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_verl_on_single_step_rows(name, seed):
    rows = rows_of(random_sessions(seed, steps=(1, 2)))  # one step per session: rows are trajectories
    set_values(rows, random_values)
    cfg = AdvantageConfig(name, gamma=0.9, lam=0.8)
    compute_advantages(rows, cfg)
    adv, ret = call_verl(name, rows, cfg)
    for i, row in enumerate(rows):
        n = len(row.response_ids)
        assert row.advantages == pytest.approx(adv[i, :n].tolist(), abs=1e-5)
        assert row.returns == pytest.approx(ret[i, :n].tolist(), abs=1e-5)


@pytest.mark.parametrize("name", VERL)
def test_multi_step_per_step_rows_match_verl_on_the_merged_trajectory(name):
    """verl on whole append-only trajectories (merged rows: feedback tokens masked) is the reference
    for every layout: per-step rows must get the same advantages token for token."""
    sessions = random_sessions(3)
    merged = rows_of(sessions, layout="merged")
    assert len(merged) == len(sessions)  # one row per trajectory
    steps = rows_of(sessions, layout="per_step")
    for rows in (merged, steps):
        set_values(rows, random_values)
    cfg = AdvantageConfig(name, gamma=0.9, lam=0.8)
    adv, ret = call_verl(name, merged, cfg)
    mask = padded(merged, "response_mask")  # verl's gae leaves values on masked tokens; the loss ignores them
    for i, row in enumerate(merged):
        row.advantages = (adv * mask)[i, : len(row.response_ids)].tolist()
        row.returns = (ret * mask)[i, : len(row.response_ids)].tolist()
    compute_advantages(steps, cfg)
    reference, got = per_token(merged), per_token(steps)
    assert got.keys() == reference.keys()
    assert [got[k] for k in sorted(got)] == pytest.approx([reference[k] for k in sorted(got)], abs=1e-5)
    ref_ret, got_ret = per_token(merged, "returns"), per_token(steps, "returns")
    assert [got_ret[k] for k in sorted(got)] == pytest.approx([ref_ret[k] for k in sorted(got)], abs=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_layouts_get_identical_advantages(name):
    sessions = random_sessions(5)
    results = []
    for layout in ("per_step", "merged"):
        rows = rows_of(sessions, layout=layout)
        set_values(rows, random_values)
        compute_advantages(rows, AdvantageConfig(name, gamma=0.95, lam=0.9))
        results.append(per_token(rows))
    assert results[0].keys() == results[1].keys()
    keys = sorted(results[0])
    assert [results[1][k] for k in keys] == pytest.approx([results[0][k] for k in keys], abs=1e-5)


# -- degenerate inputs: never NaN or inf ---------------------------------------------------------

def empty_mask_row() -> TrainRow:
    return TrainRow(prompt_ids=[1], response_ids=[5, 6], response_mask=[0, 0], old_logprobs=[0.0, 0.0],
                    token_rewards=[0.0, 0.0], segments=[Segment(0, 0, 2)], session_id="empty", group_id="g",
                    anchor_keys=["x"], values=[0.0, 0.0])


DEGENERATE = {
    "zero_variance_group": lambda: [trajectory(s, "g", [0.0, 1.0]) for s in "abc"],
    "all_failed_group": lambda: [trajectory(s, "g", [0.0, 0.0], outcome=0.0) for s in "abc"],
    "single_member_groups": lambda: [trajectory("a", "g1", [0.0, 1.0]), trajectory("b", "g2", [0.0])],
    "one_action_token": lambda: [trajectory("a", "g", [1.0], [1])],
    "empty_mask_rows": lambda: [trajectory("a", "g", [1.0], [2]), trajectory("b", "g", [0.0], [3])],
    "nothing": lambda: [],
}


@pytest.mark.parametrize("case", list(DEGENERATE))
@pytest.mark.parametrize("name", ALL)
def test_degenerate_inputs_stay_finite(name, case):
    rows = rows_of(DEGENERATE[case]())
    if case == "empty_mask_rows":
        rows.append(empty_mask_row())
    set_values(rows, lambda sid, step, k: 0.25)
    metrics = compute_advantages(rows, AdvantageConfig(name, gamma=0.9, lam=0.9))
    for row in rows:
        assert len(row.advantages) == len(row.returns) == len(row.response_ids)
        assert all(math.isfinite(x) for x in row.advantages + row.returns)
        assert all(a == 0.0 for a, m in zip(row.advantages, row.response_mask, strict=True) if not m)
    assert all(math.isfinite(v) for v in metrics.values())
    if case in ("zero_variance_group", "all_failed_group") and name in ("grpo", "rloo", "gigpo",
                                                                        "reinforce_plus_plus_baseline"):
        assert all(a == pytest.approx(0.0, abs=1e-6) for row in rows for a in row.advantages)
    if case == "zero_variance_group":
        assert metrics["adv/zero_variance_groups"] == 1.0
    if case == "one_action_token" and name in ("gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                                               "steppo"):
        assert rows[0].advantages == pytest.approx([0.0], abs=1e-3)  # whitening one number leaves ~0 (verl eps)
    if case == "empty_mask_rows":
        assert rows[-1].advantages == [0.0, 0.0]


# -- registry and errors ------------------------------------------------------------------------

def test_registry_lists_and_rejects_unknown_names():
    assert set(ALL) <= set(list_adv_estimators())
    assert get_adv_estimator("grpo").source == "verl" and get_adv_estimator("gigpo").source == "agentr1"
    assert get_adv_estimator("steppo").needs_values and get_adv_estimator("steppo").level == "step"
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'ppo'; registered: .*gigpo.*grpo.*steppo"):
        compute_advantages([], AdvantageConfig("ppo"))


def test_custom_estimators_register_in_the_same_form(monkeypatch):
    # registered for this test only: later tests see the real registry
    monkeypatch.setattr(ESTIMATOR_REGISTRY, "entries", dict(ESTIMATOR_REGISTRY.entries))

    @register_adv_est("test_constant", source="agentr1")
    def constant(batch, cfg):
        return batch.response_mask * 2.0, batch.response_mask * 3.0

    rows = rows_of([trajectory("a", "g", [1.0], [2])])
    compute_advantages(rows, AdvantageConfig("test_constant"))
    assert rows[0].advantages == [2.0, 2.0] and rows[0].returns == [3.0, 3.0]
    with pytest.raises(ValueError, match="already registered"):
        register_adv_est("grpo")(constant)


def test_bad_inputs_fail_clearly():
    rows = rows_of([trajectory("a", "g", [1.0], [2])])
    with pytest.raises(ValueError, match=r"needs critic values on every row \(TrainRow.values"):
        compute_advantages(rows, AdvantageConfig("gae"))
    rows[0].token_rewards[-1] = math.nan
    with pytest.raises(FloatingPointError, match="token rewards contain NaN"):
        compute_advantages(rows, AdvantageConfig("grpo"))
    rows = rows_of([trajectory("a", "g", [1.0], [2])])
    rows[0].anchor_keys = []
    with pytest.raises(ValueError, match="gigpo needs an anchor key"):
        compute_advantages(rows, AdvantageConfig("gigpo"))
    rows = rows_of([trajectory("a", "g", [1.0], [2])])
    rows[0].token_rewards = [1.0, 0.0]
    rows[0].response_mask = [0, 1]
    with pytest.raises(ValueError, match="not an action token"):
        compute_advantages(rows, AdvantageConfig("grpo"))


def test_the_job_configs_advantage_floor_reaches_the_estimator():
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.loop import advantage_config

    job = JobConfig.model_validate({"offline": {"db": "sqlite:///x.db"}, "algorithm": {"advantage_floor": 0.0}})
    assert advantage_config(job).advantage_floor == 0.0
    assert advantage_config(JobConfig.model_validate({"offline": {"db": "sqlite:///x.db"}})).advantage_floor is None
