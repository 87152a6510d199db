"""The embedded engine's options are declared once (:class:`agentr1.engine.EngineOptions`): the gateway's settings
and the training job's rollout nest the same model as ``engine``, the job's old flat keys are refused with their new
name, and the trainer's gateway gets the rollout's options as they are."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from agentr1.engine import EngineOptions
from agentr1.gateway import GatewaySettings
from agentr1.trainer.config import RENAMED_ENGINE_KEYS, JobConfig, RolloutConfig
from agentr1.trainer.serving import gateway_settings

JOB = {"agent": {"entrypoint": "e2e_agent:solve"}, "trainer": {"device": "cpu"}}


def test_the_engine_knobs_have_one_declaration():
    """Both models nest the engine's own model, and neither declares a knob of it again under another name."""
    assert GatewaySettings.model_fields["engine"].annotation is EngineOptions
    assert RolloutConfig.model_fields["engine"].annotation is EngineOptions
    knobs = set(EngineOptions.model_fields)
    for model in (GatewaySettings, RolloutConfig):
        flat = set(model.model_fields) - {"engine"}
        assert not flat & knobs, (model.__name__, flat & knobs)
        assert not {f for f in flat if f.startswith("engine_") or f.startswith("cache_")}, model.__name__
        assert not flat & RENAMED_ENGINE_KEYS.keys()


@pytest.mark.parametrize("old", sorted(RENAMED_ENGINE_KEYS))
def test_an_old_rollout_key_is_refused_with_its_new_name(tmp_path: Path, old: str):
    value = {"engine_compile": True, "prefill_budget": 64, "engine_exact": False, "cache_gb": 1.0,
             "engine_dtype": "bfloat16"}[old]
    new = f"actor_rollout_ref.rollout.{RENAMED_ENGINE_KEYS[old]}"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**JOB, "actor_rollout_ref": {"rollout": {old: value}}}))
    with pytest.raises(ValidationError, match=f"actor_rollout_ref.rollout.{old} is now {new}"):
        JobConfig.from_yaml(path)
    path.write_text(yaml.safe_dump(JOB))
    with pytest.raises(ValidationError, match=f"is now {new}"):
        JobConfig.from_yaml(path, [f"actor_rollout_ref.rollout.{old}={yaml.safe_dump(value).splitlines()[0]}"])


def test_the_new_keys_load_from_yaml_and_overrides(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**JOB, "actor_rollout_ref": {"rollout": {"engine": {"dtype": "bfloat16"}}}}))
    engine = JobConfig.from_yaml(path, ["actor_rollout_ref.rollout.engine.cache_gb=0.5"]).actor_rollout_ref.rollout.engine
    assert (engine.dtype, engine.cache_gb, engine.device) == ("bfloat16", 0.5, "cpu")


def test_the_trainers_gateway_gets_exactly_the_rollouts_engine_options(tiny_model_path: Path):
    from agentr1.gateway.backends import local_backend

    cfg = JobConfig.model_validate({**JOB, "actor_rollout_ref": {"rollout": {
        "max_concurrency": 48, "engine": {"dtype": "float32", "exact": False, "prefill_budget": 32, "threads": 1}}}})
    engine = cfg.actor_rollout_ref.rollout.engine
    assert (engine.device, engine.max_batch_size) == ("cpu", 48)  # trainer.device; a batch for every rollout
    settings = gateway_settings(cfg, model=tiny_model_path, run_id="r")
    assert settings.engine == engine
    backend = local_backend(settings)  # the engine is built, not started
    assert backend.engine.options == engine


def test_the_options_travel_to_an_engine_process_and_a_gateway_shard_unchanged():
    options = EngineOptions(device="cpu", dtype="bfloat16", cache_gb=0.25, threads=2)
    assert pickle.loads(pickle.dumps(options)) == options
    settings = GatewaySettings(engine=options)
    assert GatewaySettings(**settings.model_dump()).engine == options  # how GatewayShards hands its settings over
    with pytest.raises(ValidationError, match="frozen"):
        options.dtype = "float32"  # type: ignore[misc]
