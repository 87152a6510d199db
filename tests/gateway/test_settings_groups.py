"""GatewaySettings nested by concern (engine, auth, write, image, launch): constructed in code, from the environment
(``AGENTR1_<GROUP>__<FIELD>``), and the flat names of earlier releases refused with their new place."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentr1.engine import EngineOptions
from agentr1.gateway import AuthSettings, GatewaySettings, ImageSettings, LaunchSettings, WriteSettings
from agentr1.gateway.settings import RENAMED


def test_groups_are_built_in_code_and_read_from_the_environment(monkeypatch):
    settings = GatewaySettings(engine=EngineOptions(dtype="bfloat16"), auth=AuthSettings(admin_key="a"),
                               write=WriteSettings(durable=False), image=ImageSettings(max_count=2),
                               launch=LaunchSettings(servers=3))
    assert (settings.engine.dtype, settings.auth.admin_key, settings.write.durable, settings.image.max_count,
            settings.launch.servers) == ("bfloat16", "a", False, 2, 3)
    monkeypatch.setenv("AGENTR1_ENGINE__CACHE_GB", "2")
    monkeypatch.setenv("AGENTR1_AUTH__RUN_KEYS", '{"run-a": "key-a"}')
    monkeypatch.setenv("AGENTR1_WRITE__BATCH_SIZE", "8")
    from_env = GatewaySettings(engine={"dtype": "float32"})  # a group given in part keeps the environment's rest
    assert (from_env.engine.cache_gb, from_env.engine.dtype) == (2.0, "float32")
    assert from_env.auth.run_keys == {"run-a": "key-a"} and from_env.write.batch_size == 8


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_an_old_flat_setting_is_refused_with_its_new_place(old, new):
    with pytest.raises(ValidationError, match=f"the setting {old} is now {new}"):
        GatewaySettings(**{old: None})


def test_an_old_environment_variable_is_refused_with_its_new_name(monkeypatch):
    monkeypatch.setenv("AGENTR1_ENGINE_DTYPE", "bfloat16")
    with pytest.raises(ValidationError, match="AGENTR1_ENGINE_DTYPE is now AGENTR1_ENGINE__DTYPE"):
        GatewaySettings()
    monkeypatch.delenv("AGENTR1_ENGINE_DTYPE")
    with pytest.raises(ValidationError, match=r"launch is now launch\.enabled"):
        GatewaySettings(launch=True)


def test_the_launch_command_keeps_its_environment_variable(monkeypatch):
    monkeypatch.setenv("AGENTR1_SGLANG_LAUNCH_COMMAND", "python fake.py")
    assert GatewaySettings().launch.command == "python fake.py"
