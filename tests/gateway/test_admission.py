"""The local engine's admission policy (``_admission.py``): when queued requests are prefilled
before the next decode step."""

from __future__ import annotations

import time

from agentr1.gateway.backends._admission import MAX_WAIT_S, AdmissionPolicy
from agentr1.gateway.backends._rows import Row
from agentr1.gateway.backends.base import SamplingParams


def queued(n: int, age_s: float = 0.0) -> list[Row]:
    rows = [Row([1, 2, 3], SamplingParams(), sink=None) for _ in range(n)]  # type: ignore[arg-type]
    for row in rows:
        row.queued_at = time.perf_counter() - age_s
    return rows


def test_small_batches_and_idle_engines_admit_every_arrival():
    policy = AdmissionPolicy()
    policy.record(0.1)
    assert policy.admit_now(queued(1), running=0, max_batch_size=128)
    assert policy.admit_now(queued(1), running=7, max_batch_size=128)
    assert policy.admit_now([], running=64, max_batch_size=128)


def test_a_few_arrivals_wait_for_company_at_most_one_admission():
    policy = AdmissionPolicy()
    policy.record(0.1)
    assert not policy.admit_now(queued(2), running=64, max_batch_size=128)  # 2 < 64 / 4, just queued
    assert policy.admit_now(queued(16), running=64, max_batch_size=128)  # a quarter of the running rows
    assert policy.admit_now(queued(2), running=126, max_batch_size=128)  # as many as the batch has room for
    assert policy.admit_now(queued(2, age_s=0.11), running=64, max_batch_size=128)  # waited one admission


def test_an_outlier_admission_holds_nobody_back_long():
    policy = AdmissionPolicy()
    policy.record(5.0)  # the first admission allocated the cache and captured graphs
    assert policy.admission_s == MAX_WAIT_S
    assert policy.admit_now(queued(1, age_s=MAX_WAIT_S), running=64, max_batch_size=128)
    for _ in range(20):
        policy.record(0.05)
    assert abs(policy.admission_s - 0.05) < 0.01
