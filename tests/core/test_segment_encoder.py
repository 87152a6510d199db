"""The segment cache of prompt tokenisation (core/rendering/segments.py) gives exactly the ids of tokenising
the whole text, for SmolLM2's tokenizer on rendered agent prompts, and turns itself off for a tokenizer whose
pre-tokeniser looks across special tokens."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from agentr1.core.rendering import load_renderer
from agentr1.core.rendering.segments import SegmentEncoder

TOOLS = [{"type": "function", "function": {"name": "calc", "description": "Add two numbers.",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}]


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_path):
    return AutoTokenizer.from_pretrained(smollm2_path)


def conversations(seed: int, n: int) -> list[list[dict]]:
    rng = random.Random(seed)
    words = ["hello", " spaced  out", "\n\nnew lines\n", "12+7=19", "é ü 中文 🙂", "\ttab", "<tool_call>", "{\"a\": 1}",
             "<|im_end|>", "<|im_start|>"]  # the last two: special tokens inside a message's text
    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": "You are a careful agent."}]
        for _turn in range(rng.randint(1, 6)):
            messages.append({"role": "user", "content": "".join(rng.choices(words, k=rng.randint(1, 8)))})
            messages.append({"role": "assistant", "content": "".join(rng.choices(words, k=rng.randint(0, 5)))})
        messages.append({"role": "user", "content": f"question {rng.random()}"})
        out.append(messages)
    return out


def test_smollm2_prompts_tokenise_exactly_as_a_whole(smollm2_tokenizer):
    renderer = load_renderer(smollm2_tokenizer, "chatml")
    encoder = SegmentEncoder(smollm2_tokenizer)
    assert encoder.exact
    for messages in conversations(seed=0, n=60):
        for tools in (None, TOOLS):
            text = renderer.render_text(messages, tools)
            whole = list(smollm2_tokenizer.encode(text, add_special_tokens=False))
            assert encoder.encode(text) == whole  # cold: every segment new
            assert encoder.encode(text) == whole  # warm: every segment from the cache
            assert renderer.render(messages, tools) == whole  # the renderer's own path uses it


def test_a_tokenizer_that_looks_across_special_tokens_is_used_whole():
    """SentencePiece-style Metaspace with prepend_scheme "first" marks only the text's first word: tokenising
    the segments apart would mark each segment's first word. The probe sees it and the encoder stays whole."""
    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    raw.train_from_iterator(["hello world, a user said hello", "assistant answers the world"] * 50,
                            trainers.BpeTrainer(vocab_size=200, special_tokens=["[UNK]", "<|sep|>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, additional_special_tokens=["<|sep|>"])
    text = "hello world<|sep|>assistant answers<|sep|>user said hello"
    assert SegmentEncoder(tokenizer).exact is False
    assert SegmentEncoder(tokenizer).encode(text) == list(tokenizer.encode(text, add_special_tokens=False))
