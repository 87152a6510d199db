"""Where a training job's rollouts are served: the gateway in front of the backend that
``actor_rollout_ref.rollout.name`` selects (verl's name for it).

The gateway is :class:`agentr1.gateway.EmbeddedGateway` on :func:`gateway_settings` (the same
settings as ``agentr1 gateway``'s flags, so the backend comes from the same factory):

- ``local``: the embedded engine (:class:`~agentr1.gateway.backends.LocalBackend`); weights move to
  it as tensors. ``engine_process`` runs it in a child process of its own: in this process the
  gateway's event loop and the agents hold the GIL most of a rollout, and an engine thread waits for
  it around every torch op (``bench/rollout_bench.py`` measures both).
- ``sglang`` / ``vllm``: the gateway's remote backend (health checks, retries, failover, sticky
  routing) over ``rollout.urls``, or over SGLang servers this job starts and supervises
  (``rollout.launch``: the gateway's ``launch``, as ``agentr1 gateway --launch``). Weights move as a
  HF directory the servers load from disk (:meth:`~agentr1.trainer.policy.local.LocalPolicy.sync_to`), or, for
  SGLang servers on this machine (``rollout.weight_sync``), from memory: CUDA IPC handles to the policy's own
  tensors through ``/update_weights_from_tensor`` (:mod:`agentr1.gateway.backends.tensor_ipc`).

Policy versions. The version recorded on every step is the one the backend reports for that
answer (SGLang's ``weight_version``; vLLM reports none, so the backend's own counter), and the
trainer takes its ``policy_version`` from what the backend returns after each sync, so the two
cannot drift. Servers that report another version than the trainer's at setup (a resumed run, or
servers still holding an earlier run's weights) first get the trainer's current weights.

Event loops. The gateway runs under uvicorn on its own thread and event loop; a remote backend's
HTTP client and its pause gate belong to that loop, while the trainer's loop is another one. So
``update_weights(path)`` is submitted to the gateway's loop (:meth:`EmbeddedGateway.run_on_loop`), and the
directory is written from the trainer's side, which never blocks the gateway while it saves.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentr1.gateway import EmbeddedGateway, GatewaySettings, GatewayShards
from agentr1.gateway.backends import Backend, engine_counters
from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig

if TYPE_CHECKING:
    from agentr1.gateway.backends import LocalBackend, SGLangLauncher

__all__ = ["Serving", "default_gateway_processes", "engine_gets_own_process", "gateway_settings", "start_serving"]

log = logging.getLogger("agentr1.trainer.serving")


class _OnGatewayLoop:
    """A remote backend's ``update_weights`` run on the gateway's event loop, awaitable from any other
    loop. It has no ``update_weights_from_tensors``, so the policy syncs through a directory."""

    weights_in_memory = False

    def __init__(self, gateway: EmbeddedGateway) -> None:
        self.gateway = gateway

    async def update_weights(self, path: str) -> int:
        assert self.gateway.backend is not None
        return int(await self.gateway.run_on_loop(self.gateway.backend.update_weights(path)))


class _TensorsOnGatewayLoop(_OnGatewayLoop):
    """As :class:`_OnGatewayLoop`, with the SGLang backend's ``update_weights_from_tensors``: the policy hands its
    tensors over in memory (``rollout.weight_sync``)."""

    weights_in_memory = True

    async def update_weights_from_tensors(self, tensors: Any) -> int:
        assert self.gateway.backend is not None
        return int(await self.gateway.run_on_loop(self.gateway.backend.update_weights_from_tensors(tensors)))


@dataclass
class Serving:
    """The running embedded gateway (``url``) in front of the rollout backend (and, with ``launch``,
    the SGLang servers it started)."""

    gateway: EmbeddedGateway
    shards: GatewayShards | None = None  # rollout.gateway_processes > 1: the gateway processes beside this one
    tensor_sync: bool = False  # remote servers take the weights from memory (RolloutConfig.tensor_sync)

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def rollout_urls(self) -> list[str]:
        """The gateways a rollout's sessions are spread over: the shards, else this process's gateway."""
        return list(self.shards.urls) if self.shards is not None else [self.url]

    @property
    def backend(self) -> Backend:
        assert self.gateway.backend is not None  # a started gateway has one
        return self.gateway.backend

    @property
    def launcher(self) -> SGLangLauncher | None:
        """The SGLang servers the gateway launched (``rollout.launch``), else None."""
        return self.gateway.launcher

    @property
    def remote(self) -> bool:
        return self.backend.name in ("sglang", "vllm")

    @property
    def policy_version(self) -> int:
        return int(self.backend.policy_version)

    def engine_counters(self) -> dict[str, float]:
        """The embedded engine's counters so far (``EngineStats``: forward passes, decode steps, prompt
        tokens prefilled and served from cached prefixes, tokens generated, busy seconds); empty for
        a backend that keeps none (SGLang, vLLM)."""
        engine = self.gateway.abilities.engine_stats
        if engine is None:
            return {}
        engine.refresh_stats()  # an engine process: its counters include what the shards' rows did
        return engine_counters(engine)

    async def sync(self, policy: Any) -> int:
        """The current policy to the servers; returns the policy version they report now."""
        if self.launcher is not None and self.launcher.error is not None:
            raise RuntimeError(f"the SGLang servers this job launched are gone: {self.launcher.error}")
        if not self.remote:
            return int(await policy.sync_to(self.backend))
        on_loop = _TensorsOnGatewayLoop if self.tensor_sync else _OnGatewayLoop
        return int(await policy.sync_to(on_loop(self.gateway)))

    async def release_cache(self) -> int:
        """Free the embedded engine's KV cache while it runs no row (before an update: the new weights forget its
        prefixes anyway); returns the bytes freed, 0 for a backend without one here (SGLang, vLLM)."""
        cache = self.gateway.abilities.cache
        return 0 if cache is None else int(await cache.release_cache())

    async def align(self, policy: Any, policy_version: int) -> int:
        """At setup: if the servers report another version than the trainer's ``policy_version``, load
        the policy's weights into them. Returns the version to record from now on."""
        if self.policy_version == policy_version:
            return policy_version
        log.warning("the %s servers report policy version %d, the trainer %d: loading the trainer's weights "
                    "into them; versions continue from what they report", self.backend.name, self.policy_version,
                    policy_version)
        return await self.sync(policy)

    def close(self) -> None:
        if self.shards is not None:
            self.shards.stop()  # before the engine they share stops
        self.gateway.stop()  # the gateway closes the backend it built, on its loop, then stops launched servers


def gateway_settings(cfg: JobConfig, *, model: Path | str, run_id: str, log_dir: Path | None = None
                     ) -> GatewaySettings:
    """The embedded gateway's settings for a job: ``model`` served by the backend
    ``actor_rollout_ref.rollout`` selects, its embedded engine on the rollout's ``engine`` options as they are
    (the rollout's ``launch`` is the gateway's launch group)."""
    rollout = cfg.actor_rollout_ref.rollout
    local = rollout.name == "local"
    launch = rollout.launch
    if launch.enabled and launch.log_dir is None and log_dir is not None:
        launch = launch.model_copy(update={"log_dir": str(log_dir)})
    return GatewaySettings(db=cfg.db, accept_any_model=True, default_run=run_id, model=str(model),
                           backend=rollout.name, backend_urls=list(rollout.urls), engine=rollout.engine,
                           served_model_name="policy" if local else None,
                           tool_call_parser=rollout.tool_call_parser, launch=launch)


def start_serving(cfg: JobConfig, store: TraceStore, model_path: Path, serve_from: Path, *, run_id: str,
                  policy_version: int, log_dir: Path, engine_process: bool | None = None) -> Serving:
    """Start the backend ``cfg.actor_rollout_ref.rollout`` selects (launching SGLang servers first when
    asked) behind an embedded gateway on a free loopback port. ``serve_from``: the weights the embedded
    engine loads (launched servers start from ``model_path``; :meth:`Serving.align` brings them up to date).
    ``engine_process``: the local engine in a process of its own (None: :func:`engine_gets_own_process`).
    ``rollout.gateway_processes`` > 1: that many gateway processes share the engine process (:attr:`Serving.shards`,
    where the rollout's sessions go: :attr:`Serving.rollout_urls`); weights still go through this process's
    gateway."""
    local = cfg.actor_rollout_ref.rollout.name == "local"
    settings = gateway_settings(cfg, model=serve_from if local else model_path, run_id=run_id, log_dir=log_dir)
    backend: LocalBackend | None = None
    shards = 1
    if local:
        # lazy: the embedded engine's torch stack, only for a local backend
        from agentr1.gateway.backends import local_backend

        separate = engine_gets_own_process(settings.engine.device) if engine_process is None else engine_process
        shards = cfg.actor_rollout_ref.rollout.gateway_processes or default_gateway_processes(separate)
        if shards > 1 and not separate:
            log.info("rollout.gateway_processes=%d: the engine runs in a process of its own, shared by them", shards)
        backend = local_backend(settings, policy_version=policy_version, engine_process=separate or shards > 1)
    serving = Serving(EmbeddedGateway(settings, store=store, backend=backend, owns_backend=True,
                                      policy_version=policy_version).start(),
                      tensor_sync=cfg.actor_rollout_ref.rollout.tensor_sync)
    if shards > 1:
        try:
            assert backend is not None  # (only a local engine's process is shared)
            serving.shards = GatewayShards(settings, backend.engine_address, shards).start()
        except BaseException:
            serving.close()
            raise
    return serving


def default_gateway_processes(engine_process: bool) -> int:
    """``rollout.gateway_processes`` when the job leaves it unset: with the engine in a process of its own (a GPU),
    one gateway process per 4 cores up to 4 (on the H200's 16 cores 4 took a calculator rollout from 0.56-0.62 to
    0.66-0.67 of the engine's own speed, docs/benchmarks.md, the rollout rows); else 1 (on the CPU the engine needs the
    cores)."""
    if not engine_process:
        return 1
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def engine_gets_own_process(device: str) -> bool:
    """Whether the local engine gets a process of its own by default: ``AGENTR1_ENGINE_PROCESS`` (1/0)
    if set, else on a GPU."""
    value = os.environ.get("AGENTR1_ENGINE_PROCESS", "").strip().lower()
    if value:
        return value not in ("0", "false", "no", "off")
    return device.startswith("cuda") or (device == "auto" and _has_cuda())


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
