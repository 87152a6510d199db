"""A step records the model directory that served it, beside the name it was served under (issue 57).

The trainer's gateway serves its policy under the name ``policy``: no tokenizer can be found by that name. Each step
records the served model's directory too (``model_path``), so the viewer and ``agentr1 traces show`` decode the tokens
without being told where the tokenizer is.
"""

from __future__ import annotations

import httpx
from typer.testing import CliRunner

from agentr1.cli.main import app as cli
from agentr1.gateway.server import BackgroundServer
from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.serving import start_serving
from agentr1.viewer import ViewerSettings, create_viewer_app


def test_the_trainers_gateway_records_the_model_directory_and_the_viewer_decodes_by_it(tmp_path, tiny_model_path):
    db = f"sqlite:///{tmp_path / 'traces.db'}"
    job = JobConfig.model_validate({"run_name": "served", "db": db, "agent": {"entrypoint": "e2e_agent:solve"},
                                    "actor_rollout_ref": {"model": str(tiny_model_path)},
                                    "trainer": {"device": "cpu"}})
    with TraceStore.open(db) as store:
        store.ensure_run("served-run", "served")
        serving = start_serving(job, store, tiny_model_path, tiny_model_path, run_id="served-run", policy_version=0,
                                log_dir=tmp_path / "logs", engine_process=False)
        try:
            created = httpx.post(f"{serving.url}/sessions", json={"run_id": "served-run"}, timeout=30).json()
            answer = httpx.post(f"{created['base_url']}/chat/completions", timeout=120, json={
                "model": "policy", "max_tokens": 6, "messages": [{"role": "user", "content": "Say hello."}]})
            assert answer.status_code == 200, answer.text
        finally:
            serving.close()
        (step,) = store.get_session(created["id"]).steps
    assert (step.model, step.model_path) == ("policy", str(tiny_model_path))  # the name, and what served it
    assert step.action_ids

    with BackgroundServer(create_viewer_app(ViewerSettings(db=db)), ready_path="/api/health") as url:  # no --tokenizer
        detail = httpx.get(f"{url}/api/sessions/{created['id']}", timeout=60).json()
        rows = httpx.get(f"{url}/api/sessions/{created['id']}/rows", timeout=60).json()
    assert detail["tokenizer"] == rows["tokenizer"] == str(tiny_model_path)
    (shown,) = detail["steps"]
    assert [t["id"] for t in shown["action_tokens"]] == step.action_ids
    assert all(isinstance(t["text"], str) for t in shown["action_tokens"])  # decoded text, not #id
    assert "".join(t["text"] for t in shown["action_tokens"]).startswith(step.action["content"] or "")
    assert all(isinstance(t["text"], str) for row in rows["rows"] for t in row["tokens"])

    shown_by_cli = CliRunner().invoke(cli, ["traces", "show", created["id"], "--db", db])
    assert shown_by_cli.exit_code == 0, shown_by_cli.output
    assert "observation (tail): '" in shown_by_cli.output  # decoded with the recorded model's tokenizer
