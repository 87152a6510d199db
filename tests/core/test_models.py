"""Model preparation: the SmolLM2 conversion fixes, tiny test models, the cache, resolve_model."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from agentr1.core import model_cache
from agentr1.core.models import build_tiny_random_model, models_cache_dir, resolve_model

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    # The tiny model carries exactly the fixed SmolLM2 tokenizer.
    return AutoTokenizer.from_pretrained(tiny_model_path)


def test_eos_and_pad_are_im_end(tokenizer, tiny_model_path):
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == im_end == 2
    assert GenerationConfig.from_pretrained(tiny_model_path).eos_token_id in (im_end, [im_end])
    assert len(tokenizer) == AutoConfig.from_pretrained(tiny_model_path).vocab_size == 49152


@pytest.mark.parametrize("text", ["\n\n7", "12*7=84", "The answer is 1234.", " 2024 年", "x=3.14159\n\n42"])
def test_digits_are_pretokenized_one_by_one_and_round_trip(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    digits = [tokenizer.decode([i]) for i in ids if tokenizer.decode([i]).strip().isdigit()]
    assert all(len(d.strip()) == 1 for d in digits)
    assert tokenizer.decode(ids) == text
    # What the model samples token by token re-encodes to the same ids.
    assert tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False) == ids


def test_newlines_before_a_digit_keep_their_own_token(tokenizer):
    ids = tokenizer.encode("\n\n7", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in ids] == ["\n\n", "7"]
    sampled = tokenizer.encode("12*7=", add_special_tokens=False) + ids
    assert tokenizer.encode(tokenizer.decode(sampled), add_special_tokens=False) == sampled


def test_chat_template_renders_tools_calls_and_responses(tokenizer):
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What is 12*7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "84"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=[CALCULATOR], tokenize=False, add_generation_prompt=True)
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nUse tools.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(CALCULATOR, ensure_ascii=False) + "\n</tools>" in system
    assert "<tool_call>" in system and "</tool_call>" in system
    assert rest == (
        "<|im_start|>user\nWhat is 12*7?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chat_template_plain_chatml_and_arguments_as_objects(tokenizer):
    plain = tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "hello"}],
        tokenize=False,
    )
    assert plain == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
    )
    calls = [{"function": {"name": "f", "arguments": {"a": 1}}}, {"function": {"name": "g", "arguments": {}}}]
    two = tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "Calling.", "tool_calls": calls},
            {"role": "tool", "content": "1"},
            {"role": "tool", "content": "2"},
        ],
        tokenize=False,
    )
    assert (
        '<|im_start|>assistant\nCalling.\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    ) in two


def test_tiny_model_is_small_and_deterministic(tiny_model_path, tmp_path):
    config = AutoConfig.from_pretrained(tiny_model_path)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (2, 64, 4)
    again = build_tiny_random_model(tmp_path / "again", base=tiny_model_path)
    first, second = load_file(tiny_model_path / "model.safetensors"), load_file(again / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(first[k].equal(second[k]) for k in first)
    other = load_file(build_tiny_random_model(tmp_path / "other", base=tiny_model_path, seed=1) / "model.safetensors")
    assert not all(first[k].equal(other[k]) for k in first)


def test_cache_dir_follows_agentr1_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTR1_CACHE", str(tmp_path / "c"))
    assert models_cache_dir() == tmp_path / "c" / "models"
    monkeypatch.delenv("AGENTR1_CACHE")
    assert models_cache_dir() == Path.home() / ".cache" / "agentr1" / "models"


def test_concurrent_first_builds_build_once_and_atomically(tmp_path):
    calls: list[int] = []
    started = threading.Barrier(4)

    def build(out: Path) -> None:
        calls.append(1)
        (out / "config.json").write_text("{}")

    def worker() -> None:
        started.wait()
        model_cache.build_atomically(tmp_path / "m", "test", build)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["agentr1_model.json", "config.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_incomplete_cache_is_rebuilt_and_failed_builds_leave_nothing(tmp_path):
    target = tmp_path / "m"
    target.mkdir()
    (target / "half-written").write_text("")  # no completion marker: a crashed earlier run

    def failing(out: Path) -> None:
        (out / "x").write_text("")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        model_cache.build_atomically(target, "test", failing)
    assert (target / "half-written").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    model_cache.build_atomically(target, "test", lambda out: (out / "ok").write_text(""))
    assert sorted(p.name for p in target.iterdir()) == ["agentr1_model.json", "ok"]


def test_resolve_model(tiny_model_path, tmp_path):
    assert resolve_model(str(tiny_model_path)) == tiny_model_path
    assert resolve_model(tiny_model_path) == tiny_model_path
    with pytest.raises(ValueError, match=r"'smollm2'.*'tiny'.*directory"):
        resolve_model("gpt-5")
    with pytest.raises(ValueError, match="unknown model"):
        resolve_model(str(tmp_path))  # a directory, but not a model
    tiny = resolve_model("tiny")  # built once into the user's cache
    assert tiny == models_cache_dir() / "tiny-random-smollm2" == resolve_model("tiny")
    assert (tiny / "model.safetensors").is_file() and (tiny / "tokenizer.json").is_file()


@pytest.mark.slow
def test_smollm2_conversion_is_fixed(smollm2_path):
    config = AutoConfig.from_pretrained(smollm2_path)
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    assert config.eos_token_id == 2 and config.pad_token_id == 2
    assert GenerationConfig.from_pretrained(smollm2_path).eos_token_id in (2, [2])
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    assert tok.eos_token == "<|im_end|>"
    spec = json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]
    assert spec["type"] == "Sequence"
    assert spec["pretokenizers"][0] == {"type": "Digits", "individual_digits": True}
    assert spec["pretokenizers"][1]["type"] == "ByteLevel"
    assert "<tools>" in tok.apply_chat_template([{"role": "user", "content": "x"}], tools=[CALCULATOR], tokenize=False)
    assert resolve_model("smollm2") == smollm2_path
    assert (smollm2_path / "model.safetensors").stat().st_size > 400_000_000  # float32, not re-quantised
