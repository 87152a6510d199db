"""Prometheus text: the gateway's backend gauges, and the trainer's metrics at the viewer's /metrics."""

from __future__ import annotations

import collections
import re

import httpx
from viewer_harness import RUN_ID

from agentr1.gateway.backends import check_backend
from agentr1.gateway.metrics import Metrics, backend_gauges
from agentr1.viewer.runs_dir import RunsDir, prometheus_text

SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+\-]+(inf)?$')


def assert_exposition(text: str) -> None:
    for line in text.splitlines():
        assert line.startswith("# TYPE ") or SAMPLE.match(line), f"not Prometheus text: {line!r}"


def test_backend_gauges_of_the_local_backend(smollm2_path):
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend

    backend = LocalBackend(smollm2_path, EngineOptions(device="cpu"))  # not started: nothing is loaded, only read
    gauges = backend_gauges(check_backend(backend).engine_stats)
    assert gauges["queue_depth"] == 0.0
    assert {"tokens_generated", "forward_passes", "requests_finished"} <= set(gauges)
    backend.engine._queue.extend([object(), object()])  # what waiting requests look like to /metrics
    assert backend_gauges(backend)["queue_depth"] == 2.0
    text = Metrics().render(write_queue=0, steps_committed=0, steps_failed=0, write_lag_s=0.0, policy_version=0,
                            backend=backend_gauges(backend))
    assert "# TYPE agentr1_backend_queue_depth gauge\nagentr1_backend_queue_depth 2\n" in text
    assert_exposition(text)


def test_backend_without_an_engine_report_exposes_nothing():
    assert backend_gauges(None) == {}  # (BackendAbilities.engine_stats of SGLang, vLLM, LiteLLM, the test backends)


def test_gateway_metrics_over_http(recorded):
    text = httpx.get(recorded.gateway_url + "/metrics").text
    assert_exposition(text)
    calls = int(re.search(r"^agentr1_calls_total (\d+)$", text, re.M).group(1))
    assert calls >= 8
    assert "agentr1_backend_queue_depth" not in text  # the instant backend has no queue


def test_trainer_metrics_at_the_viewer(recorded, viewer_url):
    text = httpx.get(viewer_url + "/metrics").text
    assert_exposition(text)
    latest = {}
    for line in text.splitlines():
        if line.startswith("agentr1_train_") and f'run="{RUN_ID}"' in line:
            name, value = line.split("{")[0], float(line.rsplit(" ", 1)[1])
            latest[name] = value
    assert latest["agentr1_train_step"] == 6
    assert latest["agentr1_train_reward_mean"] == 0.1 * 6
    assert latest["agentr1_train_actor_pg_loss"] == 0.5 / 6 - 0.02
    assert latest["agentr1_train_perf_tokens_per_s"] == 806.0
    types = collections.Counter(line for line in text.splitlines() if line.startswith("# TYPE"))
    assert all(n == 1 for n in types.values())  # one TYPE line per metric, with every run's sample under it


def test_runs_dir_edge_cases(tmp_path):
    assert prometheus_text(RunsDir(None)) == ""
    assert prometheus_text(RunsDir(tmp_path / "missing")) == ""
    job = tmp_path / "job"
    job.mkdir()
    partial = '{"step": 2, "lo'
    (job / "metrics.jsonl").write_text('{"step": 1, "time": 5.0, "loss": 1.5, "note": "x", "nan": null}\n' + partial)
    text = prometheus_text(RunsDir(tmp_path))
    assert 'agentr1_train_loss{run="job",out_dir="job"} 1.5' in text  # a partly written last line is skipped
    assert "note" not in text and "nan" not in text
