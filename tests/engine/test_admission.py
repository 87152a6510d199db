"""The engine's admission policy (``agentr1/engine/admission.py``): when queued requests are prefilled
before the next decode step."""

from __future__ import annotations

import threading
import time
from typing import Any

from agentr1.core.generation import SamplingParams
from agentr1.engine import Engine, EngineOptions, Row
from agentr1.engine.admission import MAX_WAIT_S, AdmissionPolicy


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


def send_burst(engine: Engine, prompt: list[int], rows: int, gap_s: float) -> list[Any]:
    """``rows`` requests queued from this thread ``gap_s`` apart (an idle worker wakes at the first); their sinks."""
    sinks = []
    for i in range(rows):
        sink = _Collect()
        engine.enqueue(Row(list(prompt), SamplingParams(max_new_tokens=2, temperature=0.0), sink, request_id=str(i)))
        sinks.append(sink)
        deadline = time.perf_counter() + gap_s
        while time.perf_counter() < deadline:  # a sleep this short overshoots
            time.sleep(0)
    return sinks


class _Collect:
    def __init__(self) -> None:
        self.done = threading.Event()

    def delta(self, token_ids: list[int], logprobs: list[float]) -> None:
        pass

    def result(self, result: Any, token_ids: list[int], logprobs: list[float]) -> None:
        self.done.set()

    def error(self, exc: BaseException) -> None:
        self.done.set()


def test_an_idle_engine_admits_a_burst_in_one_prefill(tiny_model_path):
    """24 requests 0.2 ms apart: the worker, woken by the first, waits for the others (BURST_QUIET_S) and prefills
    them together; without the wait it prefills the first alone and the rest one step later (2+ admissions)."""
    engine = Engine(tiny_model_path, EngineOptions(device="cpu", dtype="float32", threads=1, max_batch_size=32))
    engine.start()
    try:
        prompt = engine.tokenizer.encode("a burst of requests", add_special_tokens=False)
        admissions = []
        for _ in range(3):  # the first burst also starts the engine's thread pools; a loaded machine may add a gap
            before = engine.stats.prefill_passes
            sinks = send_burst(engine, prompt, 24, 0.0002)
            assert all(s.done.wait(30) for s in sinks)
            admissions.append(engine.stats.prefill_passes - before)
        assert admissions.count(1) >= 2, admissions
    finally:
        engine.close()
