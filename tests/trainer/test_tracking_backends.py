"""trainer.logger through verl's Tracking: a real training job (tiny model, CPU) logs to TensorBoard and a local
MLflow store, read back with their own readers; unknown and missing backends are clear errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_train_e2e import _config, _run

from agentr1.trainer.tracking import Tracker


@pytest.mark.timeout(900)
def test_a_job_logs_to_tensorboard_and_mlflow_read_back(tmp_path: Path, tiny_model_path: Path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = _config(tmp_path, tiny_model_path, steps=1)
    config.trainer.logger = ["console", "tensorboard", "mlflow"]
    config.trainer.project_name, config.trainer.experiment_name = "e2e-project", "e2e-experiment"
    _run(config)
    out = tmp_path / "out"
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step1 = next(h for h in history if h["step"] == 1)

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert "reward/mean" in scalars and "success/val" in scalars
    (point,) = events.Scalars("reward/mean")
    assert point.step == 1 and point.value == pytest.approx(step1["reward/mean"])

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("e2e-project")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "e2e-experiment"
    (logged,) = client.get_metric_history(run.info.run_id, "reward/mean")
    assert logged.step == 1 and logged.value == pytest.approx(step1["reward/mean"])
    assert run.data.params["run_name"] == "e2e"  # the job's config as the run's parameters


def test_unknown_backends_fail_listing_the_valid_ones(tmp_path: Path, tiny_model_path: Path):
    config = _config(tmp_path, tiny_model_path, steps=1).model_dump()
    config["trainer"]["logger"] = ["console", "tensorbored"]
    with pytest.raises(ValidationError, match="tensorboard"):
        type(_config(tmp_path, tiny_model_path, steps=1)).model_validate(config)


def test_console_only_writes_no_tensorboard_and_a_missing_package_is_named(tmp_path: Path):
    tracker = Tracker(tmp_path / "a", 1, quiet=True, backends=["console"])
    tracker.log(1, {"x": 1.0})
    tracker.close()
    assert not (tmp_path / "a" / "tensorboard").exists()
    assert importlib.util.find_spec("swanlab") is None  # not among the project's dependencies
    with pytest.raises(RuntimeError, match="swanlab"):
        Tracker(tmp_path / "b", 1, quiet=True, backends=["swanlab"])
