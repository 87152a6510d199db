"""verl on Ray: :class:`RayPolicy` trains through verl's FSDP ``TrainingWorker`` s running as Ray
actors (a real local Ray cluster, two worker processes in one gloo world: FSDP2 data parallelism,
three rows padded to four) and must change the weights exactly as the in-process
:class:`LocalPolicy` does on the same rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from policy_fixtures import make_row, run

from agentr1.trainer.policy import LocalPolicy
from agentr1.trainer.policy.ray_policy import RayPolicy


def rows() -> list:
    return [
        make_row([1, 2, 3, 4], [50, 51, 52, 53, 54], advantage=1.0),
        make_row([7], [60, 61, 62, 63, 64, 65, 66, 67], mask=[1, 1, 0, 0, 0, 1, 1, 1], advantage=-0.5),
        make_row([9, 10, 11, 12, 13, 14], [70, 71], advantage=[2.0, -1.0]),
    ]


@pytest.fixture(scope="module")
def ray_policy(tiny_model_path):
    import ray

    policy = RayPolicy(tiny_model_path, device="cpu", lr=1e-3, n_gpus_per_node=2, ray_num_cpus=2)
    assert policy.actor.world_size == 2
    yield policy
    ray.shutdown()


@pytest.mark.slow
def test_one_update_through_ray_matches_the_local_policy(ray_policy, tiny_model_path, tmp_path):
    local = LocalPolicy(tiny_model_path, device="cpu", lr=1e-3)
    before = dict(ray_policy.actor.named_tensors())
    assert before.keys() == dict(local.actor.named_tensors()).keys()
    for remote_row, local_row in zip(ray_policy.compute_logprobs(rows()), local.compute_logprobs(rows()), strict=True):
        assert remote_row == pytest.approx(local_row, abs=1e-5)

    remote_metrics = ray_policy.update(rows())
    local_metrics = local.update(rows())
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/loss", "actor/pg_clipfrac", "actor/entropy"):
        assert remote_metrics[key] == pytest.approx(local_metrics[key], rel=1e-4, abs=1e-6), key
    assert remote_metrics["actor/optimizer_steps"] == 1.0 and ray_policy.version == 1

    after = dict(ray_policy.actor.named_tensors())
    expected = dict(local.actor.named_tensors())
    moved = max(float((after[k] - before[k]).abs().max()) for k in after)
    assert moved > 1e-4  # the update changed the weights ...
    # ... as the local policy did: two ranks sum the gradient in another order than one process, and AdamW
    # turns a last-bit difference of a gradient near its eps (1e-8) into a visible one (seen once: one of
    # 8,192 elements of a matrix 1.7e-5 apart, 1.7% of this lr). So: every element within 5% of one lr step,
    # and at most 1 in 1,000 beyond the tight tolerance.
    lr = 1e-3
    for name, tensor in after.items():
        gap = (tensor - expected[name]).abs()
        assert float(gap.max()) <= 0.05 * lr, name
        loose = gap > 2e-6 + 1e-4 * expected[name].abs()
        assert int(loose.sum()) <= max(1, tensor.numel() // 1000), (name, int(loose.sum()))

    # the updated policy reaches an in-process LocalBackend (weight sync by state dict)
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend

    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", max_batch_size=2, threads=1))

    async def sync() -> tuple[int, dict]:
        await backend.start()
        try:
            version = await ray_policy.sync_to(backend)
            return version, {k: v.detach().clone() for k, v in backend.engine.model.state_dict().items()}
        finally:
            await backend.close()

    version, served = run(sync())
    assert version == 1
    for name, tensor in after.items():
        torch.testing.assert_close(served[name], tensor)


@pytest.mark.slow
def test_weights_reach_sglang_servers_through_update_weights_from_disk(ray_policy, tiny_model_path, tmp_path):
    """The SGLang path: a HF directory under ``sync_dir`` loaded by ``/update_weights_from_disk`` of a
    server speaking SGLang's protocol (tests/backends/fake_sglang.py, the real local engine behind it)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "backends"))
    import fake_sglang

    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend
    from agentr1.gateway.backends.sglang import SGLangBackend
    from agentr1.gateway.server import BackgroundServer

    served_engine = LocalBackend(tiny_model_path, EngineOptions(device="cpu", max_batch_size=2, threads=1))
    served_engine.engine.start()
    ray_policy.sync_dir = tmp_path / "weights"
    try:
        app = fake_sglang.create_app(served_engine, model_path=tiny_model_path, served_model_name="policy")
        with BackgroundServer(app, ready_path="/health", startup_timeout_s=60) as url:
            async def sync() -> int:
                backend = SGLangBackend([url], tokenizer=str(tiny_model_path))
                await backend.start()
                try:
                    return await ray_policy.sync_to(backend)
                finally:
                    await backend.close()

            version = run(sync())
            weight_version = app.state.fake.weight_version
        assert version == 1 and weight_version == "1"
        [(_, body)] = [c for c in app.state.fake.calls if c[0] == "update_weights_from_disk"]
        assert Path(body["model_path"]).parent == tmp_path / "weights"
        served = served_engine.engine.model.state_dict()
        for name, tensor in ray_policy.actor.named_tensors():
            torch.testing.assert_close(served[name], tensor)
    finally:
        run(served_engine.close())


def test_worker_counts_below_one_are_refused(tiny_model_path):
    with pytest.raises(ValueError, match="n_gpus_per_node and nnodes must be >= 1"):
        RayPolicy(tiny_model_path, device="cpu", n_gpus_per_node=0)


def test_job_config_selects_the_ray_policy_with_verl_names(tmp_path):
    from agentr1.trainer.config import JobConfig

    path = tmp_path / "job.yaml"
    path.write_text("offline: {db: sqlite:///x.db}\n")
    cfg = JobConfig.from_yaml(path, ["trainer.policy=ray", "trainer.n_gpus_per_node=8", "trainer.nnodes=2",
                                     "trainer.ray_address=auto"])
    assert (cfg.trainer.policy, cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == ("ray", 8, 2)
    with pytest.raises(ValueError, match="policy"):
        JobConfig.from_yaml(path, ["trainer.policy=spark"])
    with pytest.raises(ValueError, match="n_gpus_per_node"):
        JobConfig.from_yaml(path, ["trainer.n_gpus_per_node=0"])
