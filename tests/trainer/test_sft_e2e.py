"""Expert demonstrations replayed through the gateway -> `agentr1 sft` -> a checkpoint the gateway serves."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from examples.calculator.sft_demos import demonstrations
from safetensors.torch import load_file
from typer.testing import CliRunner

from agentr1.cli.main import app as cli
from agentr1.envs import AgentEnv, StepResult
from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.sft import SFTData, select_demonstrations
from agentr1.trainer.sft.replay import Demonstration, replay_demonstrations


class Countdown(AgentEnv):
    """Says a number; the right reply is the number minus one, twice (append-only history)."""

    def __init__(self, task):
        super().__init__(task)
        self.history = []

    async def reset(self):
        self.history = [{"role": "user", "content": str(self.task["start"])}]
        return list(self.history)

    async def step(self, action):
        turn = len(self.history) // 2 + 1
        expected = str(self.task["start"] - turn)
        reward = float((action.get("content") or "").strip() == expected)
        self.history += [{"role": "assistant", "content": action.get("content")}, {"role": "user", "content": "next"}]
        return StepResult(list(self.history), reward, turn == 2)


@pytest.mark.slow
def test_demonstrations_to_sft_checkpoint_served_by_the_gateway(tmp_path, tiny_model_path):
    db = str(tmp_path / "traces.db")
    # (c) expert demonstrations: the calculator's tool-calling expert and a plain two-turn environment
    report = replay_demonstrations(demonstrations(3), model=tiny_model_path, db=db, run_id="demos")
    assert (report.finished, report.failed) == (3, 0), report.errors
    broken = [Demonstration("short", Countdown({"start": 5}), [{"role": "assistant", "content": "4"}])]
    countdown = [Demonstration(f"c{n}", Countdown({"start": n}), [{"role": "assistant", "content": str(n - 1)},
                                                                   {"role": "assistant", "content": str(n - 2)}])
                 for n in (5, 9)]
    report = replay_demonstrations(broken + countdown, model=tiny_model_path, db=db, run_id="countdown")
    assert (report.finished, report.failed) == (2, 1) and "not done after 1 of 1" in report.errors[0]

    # the ALFWorld recipe's expert walkthroughs, one game
    from examples.alfworld.sft_demos import demonstrations as alfworld_demonstrations

    report = replay_demonstrations(alfworld_demonstrations(1), model=tiny_model_path, db=db, run_id="alfworld")
    assert (report.finished, report.failed) == (1, 0), report.errors

    with TraceStore.open(db) as store:
        (won,) = select_demonstrations(store, SFTData(db=db, run_ids=["alfworld"], min_reward=1.0)).sessions
        assert len(won.steps) >= 2 and won.metadata["demo_source"] == "scripted"
        session = store.get_session(store.list_sessions("demos")[0].id)
        assert session.status == "finished" and session.metadata["demo_source"] == "scripted"
        call, answer = session.steps
        assert call.action["tool_calls"][0]["function"]["name"] == "calculator" and call.backend == "scripted"
        assert answer.observation_ids[: len(call.observation_ids) + len(call.action_ids)] == (
            call.observation_ids + call.action_ids)  # the exact bridge: one merged row per demonstration
        assert [s.reward for s in session.steps] == [0.0, 1.0]

    out = tmp_path / "sft"
    config = tmp_path / "sft.yaml"
    config.write_text(json.dumps({
        "data": {"db": db, "run_ids": ["demos", "countdown"], "min_reward": 1.0, "train_batch_size": 2},
        "model": {"path": str(tiny_model_path)}, "optim": {"lr": 1e-3},
        "trainer": {"total_epochs": 2, "default_local_dir": str(out), "device": "cpu"}}))
    result = CliRunner().invoke(cli, ["sft", str(config), "--quiet"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2, 3, 4, 5, 6]  # 5 rows, 3 chunks of 2 per epoch
    assert history[0]["data/sessions_selected"] == 5 and history[0]["data/sessions_below_min_reward"] == 0
    assert history[-1]["sft/loss"] < history[0]["sft/loss"]
    manifest = [json.loads(line) for line in (out / "sft_data.jsonl").read_text().splitlines()]
    assert len(manifest) == 5 and not any(m["rendered_from_text"] for m in manifest)
    checkpoint = out / "checkpoints" / "step_6"
    assert summary["checkpoint"] == str(checkpoint / "hf") and (checkpoint / "policy").is_dir()
    before, after = load_file(str(tiny_model_path / "model.safetensors")), load_file(
        str(checkpoint / "hf" / "model.safetensors"))
    assert any(not (before[k] == after[k]).all() for k in before if k in after)

    # the checkpoint is what `agentr1 train` continues from and what the gateway serves
    job = JobConfig.model_validate({"agent": {"entrypoint": "x:y"}, "actor_rollout_ref": {"model": str(checkpoint / "hf")}})
    from agentr1.core.models import resolve_model
    from agentr1.engine import EngineOptions
    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends import LocalBackend
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import GatewaySettings

    backend = LocalBackend(resolve_model(job.actor_rollout_ref.model), EngineOptions(device="cpu"), model_name="policy")
    served = tmp_path / "served.db"
    # the gateway closes the engine when it stops (else its worker keeps the model for the rest of the suite)
    app = create_app(GatewaySettings(db=str(served), accept_any_model=True), backend=backend, owns_backend=True)
    with BackgroundServer(app) as url:
        made = httpx.post(f"{url}/sessions", json={"task_id": "t"}).json()
        client = openai.OpenAI(base_url=made["base_url"], api_key=made["api_key"])
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "13 + 7?"}],
                                               max_tokens=6)
    assert reply.usage.completion_tokens > 0
    with TraceStore.open(str(served)) as store:
        assert len(store.get_session(made["id"]).steps[0].action_ids) == reply.usage.completion_tokens

    bad = CliRunner().invoke(cli, ["sft", str(config), "data.run_ids=[nope]"])
    assert bad.exit_code == 2 and "no run 'nope'" in bad.output
