"""``agentr1 train`` with its rollouts on SGLang / vLLM servers (``actor_rollout_ref.rollout.name``).

SGLang and vLLM cannot run on this CPU-only machine, so the servers are tests/backends/fake_sglang.py
and fake_vllm.py as separate processes: the released HTTP protocols (generation, weight version,
``/update_weights_from_disk``, vLLM's ``/collective_rpc`` reload), answered by the real local engine
on the tiny model. The SGLang one is started by the job itself (``launch: {enabled: true}``, the launcher's
command pointed at the fake), the vLLM one is an existing server (``urls``)."""

from __future__ import annotations

import asyncio
import json
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from e2e_agent import make_tasks
from pydantic import ValidationError

from agentr1.core.generation import BackendError
from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import Trainer

BACKENDS = Path(__file__).parents[1] / "backends"
PROMPT_IDS = [1, 504, 2236, 28, 2, 198, 1, 520, 9531, 198]  # fixed ids: the servers' logprobs before / after
FAKE_VLLM = """
import sys
sys.path.insert(0, {backends!r})
import uvicorn, fake_vllm
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend
engine = LocalBackend({model!r}, EngineOptions(device="cpu", max_batch_size=8, threads=1))
engine.engine.start()
uvicorn.run(fake_vllm.create_app(engine, model_path={model!r}), host="127.0.0.1", port={port}, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job(tmp_path: Path, model: Path, rollout: dict) -> JobConfig:
    tasks = tmp_path / "tasks.jsonl"  # no validation set: only training rollouts
    tasks.write_text("".join(json.dumps(t) + "\n" for t in make_tasks("train", 4, 0)))
    return JobConfig.model_validate({
        "run_name": "served", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "e2e_agent:solve", "timeout_s": 120},
        "data": {"train_files": [str(tasks)], "train_batch_size": 1},
        "reward": {"functions": ["test_rollout_backends:distinct_reward"]},
        "actor_rollout_ref": {"model": str(model), "actor": {"optim": {"lr": 1e-3}},
                              "rollout": {"n": 2, "max_concurrency": 2, **rollout}},
        "trainer": {"total_training_steps": 2, "default_local_dir": str(tmp_path / "out"), "device": "cpu"},
    })


def distinct_reward(session, task) -> float:
    """Almost surely different for every sample (the mean id of the final action), so each group has
    non-zero advantages and every update moves the weights the servers must then serve."""
    ids = session.steps[-1].action_ids if session.steps else []
    return sum(ids) / max(1, len(ids)) / 50_000


def versions_by_step(tmp_path: Path, run_id: str) -> dict[int, set[int]]:
    """Per training step: the policy versions recorded on its finished sessions' steps (async mode
    abandons the runs still in flight when training ends, some before their first model call)."""
    with TraceStore.open(tmp_path / "traces.db") as store:
        out: dict[int, set[int]] = {}
        for session in store.list_sessions(run_id, limit=100):
            if session.status != "finished":
                continue
            steps = store.get_session(session.id).steps
            assert steps, f"session {session.id} recorded no steps"
            out.setdefault(session.metadata["step"], set()).update(st.policy_version for st in steps)
        return out


def sglang_logprobs(url: str) -> list[float]:
    body = {"input_ids": PROMPT_IDS, "sampling_params": {"max_new_tokens": 4, "temperature": 0},
            "return_logprob": True}
    meta = httpx.post(url + "/generate", json=body, timeout=60).json()["meta_info"]
    return [float(entry[0]) for entry in meta["output_token_logprobs"]]


def vllm_logprobs(url: str, model: str) -> list[float]:
    body = {"model": model, "prompt": PROMPT_IDS, "max_tokens": 4, "temperature": 0, "logprobs": 0}
    choice = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    return [float(v) for v in choice["logprobs"]["token_logprobs"]]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("weight_sync", ["auto", "disk"])
def test_sglang_launched_by_the_job_serves_rollouts_and_takes_each_update(tmp_path, tiny_model_path, weight_sync):
    """auto: launched servers take the weights from the trainer's memory (its CPU tensors in shared memory here,
    CUDA IPC handles on a GPU), no directory written; disk: a directory they load."""
    config = job(tmp_path, tiny_model_path, {
        "name": "sglang", "weight_sync": weight_sync,
        "launch": {"enabled": True, "port": free_port(), "command": shlex.join([sys.executable, str(BACKENDS / "fake_sglang.py")])}})
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        [server] = trainer.run.serving.launcher.urls
        assert httpx.get(server + "/model_info").json()["weight_version"] == "default"
        before = sglang_logprobs(server)
        final = trainer.train()

        assert final["policy_version"] == 2.0
        assert versions_by_step(tmp_path, trainer.run.progress.run_id) == {1: {0}, 2: {1}}  # as the server reported
        assert httpx.get(server + "/model_info").json()["weight_version"] == "2"
        after = sglang_logprobs(server)
        assert len(before) == len(after) == 4 and before != pytest.approx(after, abs=1e-4), "weights did not change"
        written = tmp_path / "out" / "weights-for-serving"
        if weight_sync == "disk":
            assert sorted(p.name for p in written.iterdir()) == ["policy-2"]  # loaded last; older ones removed
        else:
            assert not written.exists() or not any(written.iterdir()), "a tensor sync wrote a directory"

        # the server goes down: the next weight sync fails with the backend's message, nothing hangs
        trainer.run.serving.launcher.stop()
        with pytest.raises(BackendError, match="weight update failed on every sglang server"):
            asyncio.run(trainer.run.serving.sync(trainer.run.policy))
    finally:
        trainer.close()
    assert (tmp_path / "out" / "servers" / "sglang-0.log").is_file()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_vllm_server_given_by_url_serves_rollouts_and_takes_each_update(tmp_path, tiny_model_path):
    port = free_port()
    script = FAKE_VLLM.format(backends=str(BACKENDS), model=str(tiny_model_path), port=port)
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read().decode()[-2000:] if server.stderr else ""
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the fake vLLM server did not come up"
            time.sleep(0.2)
        before = vllm_logprobs(url, str(tiny_model_path))
        trainer = Trainer(job(tmp_path, tiny_model_path, {"name": "vllm", "urls": [url]}), quiet=True)
        trainer.setup()
        try:
            final = trainer.train()
        finally:
            trainer.close()
        assert final["policy_version"] == 2.0
        assert versions_by_step(tmp_path, trainer.run.progress.run_id) == {1: {0}, 2: {1}}
        after = vllm_logprobs(url, str(tiny_model_path))
        assert len(before) == len(after) == 4 and before != pytest.approx(after, abs=1e-4), "weights did not change"
        saved = json.loads((tmp_path / "out" / "config.json").read_text())["actor_rollout_ref"]["rollout"]
        assert saved["name"] == "vllm" and saved["urls"] == [url]
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize(("rollout", "message"), [
    ({"name": "sglang"}, "needs the servers: `urls: \\[http://host:port\\]` or `launch: {enabled: true}`"),
    ({"name": "vllm"}, "needs the servers"),
    ({"name": "sglang", "urls": ["http://a:1"], "launch": {"enabled": True}}, "either `urls`.*not both"),
    ({"name": "vllm", "launch": {"enabled": True}}, "launch starts SGLang servers"),
    ({"urls": ["http://a:1"]}, "set actor_rollout_ref.rollout.name to sglang or vllm"),
    ({"name": "sglang", "urls": ["a:1"]}, "must be http\\(s\\) base URLs"),
    ({"name": "sglang", "urls": ["http://a:1"], "launch": {"args": "--tp 2"}}, "launch.args only apply with"),
    ({"name": "sglang", "launch": {"enabled": True, "command": " "}}, "launch.command is empty"),
    ({"name": "sglang", "launch": {"enabled": True, "servers": 0}}, "greater than or equal to 1"),
    ({"name": "sglang", "launch": True}, "launch is a group now: write `launch: {enabled: true}`"),
    ({"name": "sglang", "launch": {"enabled": True}, "launch_servers": 2}, "launch_servers is now "
     "actor_rollout_ref.rollout.launch.servers"),
    ({"name": "trtllm", "urls": ["http://a:1"]}, "'local', 'sglang' or 'vllm'"),
    ({"name": "vllm", "urls": ["http://a:1"], "engine": {"compile": True}},
     "engine.compile is an option of the embedded engine \\(name local\\), not of the vllm servers"),
    ({"engine": {"prefill_budget": 8}}, "greater than or equal to 16"),
    ({"name": "sglang", "urls": ["http://a:1"], "engine": {"exact": False}},
     "engine.exact is an option of the embedded engine \\(name local\\), not of the sglang servers"),
    ({"name": "vllm", "urls": ["http://a:1"], "engine": {"dtype": "bfloat16"}},
     "engine.dtype is an option of the embedded engine \\(name local\\), not of the vllm servers"),
    ({"engine": {"dtype": "bf16"}}, "'auto', 'float32', 'bfloat16' or 'float16'"),
    ({"engine": {"device": "cuda"}}, "engine.device \\(cuda\\) is trainer.device \\(cpu\\)"),
    ({"engine": {"cache_gb": 0}}, "greater than 0"),
    ({"name": "vllm", "urls": ["http://a:1"], "weight_sync": "tensor"},
     "weight_sync tensor is for SGLang servers; the vllm rollout syncs through a directory"),
    ({"weight_sync": "tensor"}, "the local rollout syncs its engine in memory already"),
    ({"tool_call_parser": "qwen"}, "unknown tool-call parser 'qwen': use one of hermes, hermes_json, json"),
])
def test_rollout_server_config_errors_are_clear(tmp_path, rollout, message):
    with pytest.raises(ValidationError, match=message):
        job(tmp_path, tmp_path, rollout)


@pytest.mark.parametrize(("rollout", "tensor"), [
    ({"name": "sglang", "launch": {"enabled": True}}, True),  # launched here: on this machine
    ({"name": "sglang", "urls": ["http://127.0.0.1:30000", "http://localhost:30001"]}, True),
    ({"name": "sglang", "urls": ["http://127.0.0.1:30000", "http://gpu-node-2:30000"]}, False),  # another machine
    ({"name": "sglang", "urls": ["http://gpu-node-2:30000"], "weight_sync": "tensor"}, True),  # as asked
    ({"name": "sglang", "launch": {"enabled": True}, "weight_sync": "disk"}, False),
    ({"name": "vllm", "urls": ["http://127.0.0.1:8000"]}, False),
    ({}, False),
])
def test_weight_sync_auto_takes_memory_only_for_sglang_servers_on_this_machine(tmp_path, rollout, tensor):
    assert job(tmp_path, tmp_path, rollout).actor_rollout_ref.rollout.tensor_sync is tensor


def test_offline_training_serves_nothing(tmp_path):
    with pytest.raises(ValidationError, match="`offline` trains on stored sessions and serves nothing"):
        JobConfig.model_validate({"offline": {"db": "sqlite:///x.db"},
                                  "actor_rollout_ref": {"rollout": {"name": "sglang", "urls": ["http://a:1"]}}})


def test_the_embedded_engines_options_reach_its_engine(tmp_path, tiny_model_path):
    """rollout.engine (compile, prefill_budget, exact, cache_gb, dtype) -> the job's gateway settings, as they are
    -> the engine the trainer serves."""
    from agentr1.gateway.backends import local_backend
    from agentr1.trainer.serving import gateway_settings

    config = job(tmp_path, tiny_model_path, {"engine": {"compile": True, "prefill_budget": 64, "cache_gb": 0.25,
                                                        "exact": False, "dtype": "bfloat16"}})
    settings = gateway_settings(config, model=tiny_model_path, run_id="r")
    assert settings.engine is config.actor_rollout_ref.rollout.engine  # the rollout's options, not a copy by hand
    assert (settings.engine.compile, settings.engine.prefill_budget, settings.engine.cache_gb) == (True, 64, 0.25)
    assert settings.engine.exact is False and settings.engine.dtype == "bfloat16"
    # resolved at load: the trainer's device, a batch for every concurrent rollout (max_concurrency 2: 32)
    assert (settings.engine.device, settings.engine.max_batch_size) == ("cpu", 32)
    backend = local_backend(settings)
    backend.engine.start()
    try:
        engine = backend.engine.batch
        assert engine.prefill_budget == 64 and engine.cache_bytes == 2**28 and not engine.exact
        assert engine._decode_step is not engine._decode_forward  # the compiled step (compiled at its first call)
        assert backend.engine.model.dtype == torch.bfloat16 and engine.cache.dtype == torch.bfloat16
    finally:
        asyncio.run(backend.close())
    plain = local_backend(gateway_settings(job(tmp_path, tiny_model_path, {}), model=tiny_model_path, run_id="r"))
    plain.engine.start()
    try:
        batch = plain.engine.batch
        assert batch._decode_step == batch._decode_forward and batch.prefill_budget == 1024
        assert batch.cache_bytes == 2**30 and batch.exact  # the CPU's defaults
        assert plain.engine.model.dtype == torch.float32
    finally:
        asyncio.run(plain.close())


@pytest.mark.parametrize("rollout", [{}, {"name": "vllm", "urls": ["http://a:1"]}, {"engine": {"compile": True,
                                                                                                "prefill_budget": 4096}},
                                     {"name": "sglang", "launch": {"enabled": True, "servers": 2, "args": "--tp 2"}}])
def test_rollout_configs_round_trip_through_their_dump(tmp_path, rollout):
    """config.json (the dump) loads again: defaults written out are not mistaken for options set."""
    config = job(tmp_path, tmp_path, rollout)
    assert JobConfig.model_validate(config.dump()).actor_rollout_ref.rollout == config.actor_rollout_ref.rollout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_async_training_syncs_launched_sglang_servers_through_the_same_path(tmp_path, tiny_model_path):
    config = job(tmp_path, tiny_model_path, {
        "name": "sglang", "max_staleness": 1,
        "launch": {"enabled": True, "port": free_port(), "command": shlex.join([sys.executable, str(BACKENDS / "fake_sglang.py")])}})
    config.trainer.mode = "async"
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        [server] = trainer.run.serving.launcher.urls
        final = trainer.train()
        assert final["policy_version"] == 2.0
        assert httpx.get(server + "/model_info").json()["weight_version"] == "2"
    finally:
        trainer.close()
    recorded = set().union(*versions_by_step(tmp_path, trainer.run.progress.run_id).values())
    # each answer carries a version the server reported; which ones the in-flight groups saw depends on timing
    assert 0 in recorded and recorded <= {0, 1, 2}


def test_the_rollouts_tool_call_parser_reaches_the_gateway(tmp_path, tiny_qwen_path):
    """rollout.tool_call_parser -> the job's gateway settings -> the renderer that reads the policy's calls; unset,
    the model family's default (Qwen2.5-Coder: hermes_json)."""
    from agentr1.gateway import EmbeddedGateway
    from agentr1.trainer.serving import gateway_settings

    for rollout, parser in (({"tool_call_parser": "json"}, "json"), ({}, "hermes_json")):
        settings = gateway_settings(job(tmp_path, tiny_qwen_path, rollout), model=tiny_qwen_path, run_id="r")
        assert settings.tool_call_parser == rollout.get("tool_call_parser")
        with EmbeddedGateway(settings, store=None) as gateway:
            assert gateway.app.state.gateway.renderer.tool_parser.name == parser
