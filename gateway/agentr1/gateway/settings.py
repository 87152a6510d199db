"""Gateway settings: flags of `agentr1 gateway`, or AGENTR1_* environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTR1_", extra="ignore")

    model: str = Field("smollm2", description="smollm2, tiny, or a local Hugging Face model directory.")
    served_model_name: str | None = Field(None, description="Model id under /v1/models (default: from the model).")
    model_aliases: list[str] = Field(default_factory=list, description="Other model names accepted in requests.")
    accept_any_model: bool = Field(False, description="Serve the policy whatever model name a request asks for.")
    # local (embedded engine), sglang or vllm (servers at backend_urls; `model` is then the served model's
    # directory, for its tokenizer), litellm (the external model `model`; not trainable). docs/backends.md
    backend: Literal["local", "sglang", "vllm", "litellm"] = "local"
    backend_urls: list[str] = Field(default_factory=list, description="SGLang/vLLM server URLs, or LiteLLM's api_base.")
    device: str = "auto"
    max_batch_size: int = 32
    db: str = "sqlite:///agentr1.db"
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = Field(None, description="Base URL agents reach the gateway at (default http://host:port).")
    admin_key: str | None = Field(None, description="Key for /admin/* and for reading any session. Unset: admin disabled.")
    api_key: str | None = Field(None, description="Gateway-wide key for POST /sessions and unattributed calls. "
                                "Unset: those are open.")
    run_keys: dict[str, str] = Field(default_factory=dict, description="Keys confined to one run, {run id: key} "
                                     "(JSON in AGENTR1_RUN_KEYS): such a key creates sessions in its run only and "
                                     "acts on that run's sessions only. Never stored; compared in constant time.")
    max_concurrent_per_key: int = Field(0, ge=0, description="Requests in flight per key (429 over it); 0: no limit.")
    auto_session: bool = Field(True, description="Calls without a session go to an auto-created one (else 400).")
    default_run: str = Field("default", description="Run that sessions without a run belong to.")
    durable_writes: bool = Field(
        True, description="Answer a call only after its step is committed (group commit). Off: answer first, "
        "commit within write_interval_ms.",
    )
    write_batch_size: int = 256
    write_interval_ms: float = 0.0  # extra wait to fill a commit; 0: commits batch what queued meanwhile
    context_policy: str = Field(
        "append_only", description="Context policy for sessions that do not choose one: a name (append_only, "
        "sliding_window, truncate_tool_outputs, summary) or JSON {\"policy\": name, ...options}. docs/gateway.md",
    )
    abandon_idle_s: float = Field(
        0, ge=0, description="Mark running sessions without a call for this many seconds as abandoned (an agent "
        "or a gateway that died mid-session); checked periodically. 0: never.",
    )
    max_body_bytes: int = 8 * 1024 * 1024
    max_tokens_default: int = 512
    request_timeout_s: float = 600.0

    def base_url(self, request_base: str) -> str:
        """Where agents reach the gateway: ``public_url`` if set, else the address the request came to."""
        return (self.public_url or request_base).rstrip("/")
