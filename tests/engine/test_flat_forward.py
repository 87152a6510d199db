"""The CPU engine's flat decode steps and prefills (flat_forward.py) and its oneDNN-packed products (packed_linear.py)
change how fast a forward runs, not what it samples: the same requests, over two turns (the second reusing the first's
prefix), give the same ids and the same log-probability bits with the flat forward on and off, on a Llama and a Qwen2
(biased q/k/v); the packed products stay within float32 rounding of the model's own and renew with the weights."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.engine.flat_forward import FlatForward, FlatPrefill, unsupported_reason
from agentr1.engine.packed_linear import PackedLinear, fused_linears, pack_linears, packed_loaders, repack_linears
from agentr1.engine.weights import copy_into, read_safetensors
from agentr1.gateway.backends import LocalBackend


@dataclasses.dataclass
class Ran:
    """What a closed engine did: the sampled ids and log-probabilities, whether it ran the flat forward, the prompt
    tokens it served from cached prefixes."""

    samples: list[tuple[list[int], list[float]]]
    flat: bool
    cached_tokens: int


def started(path: Path, **options: Any) -> LocalBackend:
    """A float32 CPU engine of up to ten rows on the model at ``path``, started."""
    backend = LocalBackend(path, EngineOptions(device="cpu", dtype="float32", threads=1, max_batch_size=10,
                                               **options))
    backend.engine.start()
    return backend


def two_turns(backend: LocalBackend) -> list[tuple[list[int], list[float]]]:
    """Ten requests at once (prompts of different lengths, three samplers; two that share a long system prompt and
    then differ, two alike, whose rows share what they have in common), then each one's next turn at once."""
    tok = backend.engine.tokenizer
    settings = [dict(temperature=0.0), dict(temperature=1.0, seed=7), dict(temperature=0.8, top_p=0.9, seed=3)]
    prompts = [tok.encode(f"<|im_start|>user\nitem {i}: " + "and more " * i + "<|im_end|>\n<|im_start|>assistant\n",
                          add_special_tokens=False) for i in range(6)]
    system = "<|im_start|>system\nYou answer in one short sentence and never use lists or tables.<|im_end|>\n"
    prompts += [tok.encode(system + f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
                for q in ("Name a river.", "Name a mountain.", "Name a city.", "Name a city.")]
    follow_up = tok.encode("<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)

    async def turn(prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        requests = [GenerateRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=12 + i, **settings[i % 3]))
                    for i, p in enumerate(prompts)]
        results = await asyncio.gather(*(backend.generate(r) for r in requests))
        return [(r.output_ids, r.logprobs) for r in results]

    async def both() -> list[tuple[list[int], list[float]]]:
        first = await turn(prompts)
        second = await turn([p + ids + follow_up for p, (ids, _) in zip(prompts, first, strict=True)])
        return first + second

    return asyncio.run(both())


def run(path: Path, **options: Any) -> Ran:
    """:func:`two_turns` on a new engine, closed before this returns: one engine at a time (three of
    Qwen2.5-Coder-0.5B in float32 held 8 GiB)."""
    backend = started(path, **options)
    try:
        return Ran(two_turns(backend), backend.engine.batch._flat is not None, backend.stats.cached_tokens)
    finally:
        asyncio.run(backend.close())


# Qwen2 is covered by tiny_qwen (the same flat code path on random weights); the real Qwen2.5-Coder-0.5B ran here
# too (three float32 engines, a minute and a half of the suite) and is served by the gateway's Qwen tests
@pytest.mark.parametrize("model", ["tiny_model_path", "tiny_qwen_path",
                                   pytest.param("smollm2_path", marks=pytest.mark.slow)])
def test_the_flat_forward_samples_the_same_bits_as_the_models_forward(model: str,
                                                                      request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(model)
    prefills: list[int] = []
    original = FlatForward.prefill

    def counted(self: FlatForward, flat: FlatPrefill, *args: Any) -> list[torch.Tensor | None]:
        prefills.append(len(flat.groups))  # the real prefill runs; how many planned forwards it ran together
        return original(self, flat, *args)

    FlatForward.prefill = counted  # type: ignore[method-assign]
    try:
        fast = run(path)
        passes_of_one_budget = len(prefills)
        small = run(path, prefill_budget=32)  # an admission in many passes of <= 32 tokens
    finally:
        FlatForward.prefill = original  # type: ignore[method-assign]
    plain = run(path, flat_forward=False)
    assert fast.flat and not plain.flat
    assert fast.samples == plain.samples  # ids and log-probabilities, bit for bit
    assert small.samples == plain.samples
    assert sum(len(ids) for ids, _ in fast.samples) > 120  # real models stop early at their end token
    assert passes_of_one_budget >= 2 and max(prefills[:passes_of_one_budget]) > 1  # chunks of a pass together
    assert len(prefills) - passes_of_one_budget > 2 * passes_of_one_budget  # the small budget: more passes
    assert fast.cached_tokens > 0  # the second turn reused the first's prefix


def test_models_the_flat_step_does_not_cover_say_why(tiny_vlm_path: Path) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path)
    assert "Idefics3" in (unsupported_reason(model) or "")


def test_packed_products_match_the_linear_layers_and_take_their_place() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 32, bias=False))
    x = torch.randn(5, 64)
    want = model(x).detach()
    new = {name: value * 2.0 for name, value in model.state_dict().items()}
    assert pack_linears(model) == 2 and all(isinstance(m, PackedLinear) for m in (model[0], model[2]))
    with torch.inference_mode():
        assert torch.allclose(model(x), want, atol=1e-5)
        for rows in (2, 3, 16):  # a row's result does not depend on how many rows share the product
            batch = torch.randn(rows, 64)
            assert torch.equal(model(batch)[:2], model(batch[:2]))
    # the packed copy replaces the weight: same shape for state_dict, one element of memory
    assert model[0].released and model[0].weight.shape == (96, 64) and model[0].weight.untyped_storage().nbytes() == 4
    assert all(torch.equal(model.state_dict()[k], v / 2.0) for k, v in new.items())  # unpacked: the same values
    assert sorted(packed_loaders(model)) == ["0.weight", "2.weight"]
    assert copy_into(model, new) == 3  # two packed from the new tensors, the bias copied
    assert repack_linears(model) == 0  # nothing kept its weight
    with torch.inference_mode():
        hidden = torch.relu(x @ new["0.weight"].T + new["0.bias"])
        assert torch.allclose(model(x), hidden @ new["2.weight"].T, atol=1e-4)
    model.load_state_dict({k: v / 2.0 for k, v in new.items()})  # load_state_dict packs too
    with torch.inference_mode():
        assert torch.allclose(model(x), want, atol=1e-5)
    with pytest.raises(ValueError, match="shape"):
        model[2].pack(torch.zeros(3, 3))


def test_a_weight_update_reaches_the_packed_products(tiny_model_path: Path) -> None:
    backend = started(tiny_model_path)
    two_turns(backend)
    try:
        model = backend.engine.model
        assert isinstance(model.lm_head, PackedLinear) and not model.lm_head.released  # tied to the input embedding
        assert model.model.layers[0].mlp.gate_proj.released
        tensors = {name: value * 0.5 if value.dim() == 2 else value
                   for name, value in read_safetensors(tiny_model_path).items()}
        tensors.pop("lm_head.weight", None)
        backend.engine.update_weights(tensors)
        tok = backend.engine.tokenizer
        prompt = tok.encode("<|im_start|>user\nitem 0: <|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
        result = asyncio.run(backend.generate(GenerateRequest(prompt_ids=prompt, sampling=SamplingParams(
            max_new_tokens=6, temperature=0.0))))
        from transformers import AutoModelForCausalLM

        reference = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
        before = reference(torch.tensor([prompt])).logits[0].detach()
        reference.load_state_dict(tensors, strict=False)  # plain nn.Linear layers with the new weights
        with torch.no_grad():
            ids = torch.tensor([prompt + result.output_ids])
            got, want = model(ids).logits[0], reference(ids).logits[0]
        assert torch.allclose(got, want, atol=1e-4)  # the packed copies hold the new weights, not the old
        assert not torch.allclose(want[: len(prompt)], before, atol=1e-2)
        assert result.output_ids[0] == int(want[len(prompt) - 1].argmax())
    finally:
        asyncio.run(backend.close())


def test_forward_hooks_on_the_model_see_every_step(tiny_model_path: Path) -> None:
    """A hook registered on any of the model's modules (a probe, a fault injected by a test) runs at every forward,
    decode steps included: the engine decodes through the model's forward while one is registered."""
    backend = started(tiny_model_path)
    two_turns(backend)
    try:
        calls: list[int] = []
        handle = backend.engine.model.model.layers[0].mlp.register_forward_hook(
            lambda module, args, out: calls.append(args[0].shape[1]))
        before = dataclasses.replace(backend.stats)
        tok = backend.engine.tokenizer
        prompt = tok.encode("<|im_start|>user\nhooked<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
        result = asyncio.run(backend.generate(GenerateRequest(prompt_ids=prompt, sampling=SamplingParams(
            max_new_tokens=8, temperature=0.0))))
        handle.remove()
        decode_steps = backend.stats.decode_steps - before.decode_steps
        assert decode_steps == len(result.output_ids) - 1 >= 3
        assert calls.count(1) == decode_steps  # one-token queries: every decode step ran through the module
    finally:
        asyncio.run(backend.close())


def test_the_thread_count_does_not_change_what_is_sampled(smollm2_path: Path) -> None:
    """The engine's thread count may change while it runs (the free cores, ``cpu_threads.py``); the ids and
    log-probability bits of a batch must not. CPU SDPA's one-token attention changed them (its flash kernel splits
    the work by thread): float32 decode steps use two batched products instead (``slot_cache.decode_attention``)."""
    outputs = []
    for threads in (1, 2):
        backend = LocalBackend(smollm2_path, EngineOptions(device="cpu", dtype="float32", threads=threads,
                                                           prefix_cache=False))
        backend.engine.start()
        tok = backend.engine.tokenizer
        requests = [GenerateRequest(prompt_ids=tok.encode(
            f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False),
            sampling=SamplingParams(max_new_tokens=n, temperature=0.0))
            for q, n in (("Name a city in France.", 8), ("Name a large river.", 8), ("Describe a city.", 24))]

        async def together(backend: LocalBackend = backend, requests: list[GenerateRequest] = requests) -> list[Any]:
            await backend.pause()  # admitted together: one batch
            jobs = [asyncio.ensure_future(backend.generate(r)) for r in requests]
            while backend.queue_depth < len(requests):
                await asyncio.sleep(0.01)
            await backend.resume()
            return [(r.output_ids, r.logprobs) for r in await asyncio.gather(*jobs)]

        try:
            outputs.append(asyncio.run(together()))
        finally:
            asyncio.run(backend.close())
    assert outputs[0] == outputs[1]


def test_fused_siblings_give_each_layer_its_own_bits_and_take_new_weights(tiny_qwen_path: Path) -> None:
    """q/k/v and gate/up packed as one stacked weight (``FusedLinears``): the model's logits are the bits of the
    same model with each layer's own product; a weight update, whole or of one layer, reaches the stacked weight."""
    from transformers import AutoModelForCausalLM

    def load() -> Any:
        return AutoModelForCausalLM.from_pretrained(tiny_qwen_path, dtype=torch.float32).eval()

    fused, separate = load(), load()
    pack_linears(fused)
    pack_linears(separate, fuse=False)
    attention, mlp = fused.model.layers[0].self_attn, fused.model.layers[0].mlp
    group = fused_linears(attention, ("q_proj", "k_proj", "v_proj"))
    assert group is not None and fused_linears(mlp, ("gate_proj", "up_proj")) is not None
    assert attention.q_proj.packed is None and attention.q_proj.bias is not None  # Qwen2: biased q/k/v
    assert fused_linears(separate.model.layers[0].self_attn, ("q_proj", "k_proj", "v_proj")) is None
    ids = torch.tensor([[5, 17, 99, 3, 250, 7, 8, 41]])
    with torch.inference_mode():
        assert torch.equal(fused(ids).logits, separate(ids).logits)
        x = torch.randn(3, attention.q_proj.in_features)
        assert torch.equal(attention.k_proj(x), separate.model.layers[0].self_attn.k_proj(x))  # k alone: no stale q
    original = {k: v.clone() for k, v in load().state_dict().items()}
    assert all(torch.equal(fused.state_dict()[k], v) for k, v in original.items() if k in fused.state_dict())

    new = {k: v * 1.5 if v.dim() == 2 else v + 0.25 for k, v in original.items()}
    new.pop("lm_head.weight", None) if fused.config.tie_word_embeddings else None
    for model in (fused, separate):
        copy_into(model, new)
    with torch.inference_mode():
        assert torch.equal(fused(ids).logits, separate(ids).logits)
    one = "model.layers.0.self_attn.k_proj.weight"  # one layer of a group: staged, packed with its siblings' weights
    for model in (fused, separate):
        model.load_state_dict({one: new[one] * -1.0}, strict=False)
        repack_linears(model)
    with torch.inference_mode():
        assert torch.equal(fused(ids).logits, separate(ids).logits)
    assert torch.equal(fused.state_dict()[one], new[one] * -1.0)
    assert torch.equal(fused.state_dict()["model.layers.0.self_attn.q_proj.weight"], new["model.layers.0.self_attn.q_proj.weight"])
