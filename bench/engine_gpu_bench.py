"""GPU decode speed of the local engine against plain transformers ``generate``, all in one run,
then the engine's exactness checks (tests/engine/test_engine_exactness.py, test_engine_overlap.py) on the
same GPU.

    python3 bench/engine_gpu_bench.py --tokenizer .benchtok --out $OUT/engine_gpu.jsonl

A random SmolLM2-135M-shaped bf16 model (built from SmolLM2's config, no weights needed), one
random 300-token prompt per request, 64 new tokens sampled at temperature 1 (the random model
almost never samples an end token; generated tokens are counted, not assumed), at batch 1, 32,
128 and 256. Per batch: our ``local`` engine (requests submitted together through the backend's
asyncio API, slot KV cache, CUDA graphs), ``model.generate`` eager (dynamic cache) and
``model.generate(cache_implementation="static")`` (transformers compiles the decode step: the
baseline). Each is run once untimed (graph capture / compilation) and then timed; wall time
includes the prefill. The device image has no fastapi, so the engine modules are imported without
the gateway app.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def import_engine() -> Any:
    """``LocalBackend`` on a model directory and engine options (``EngineOptions``' fields); where fastapi is
    missing, ``agentr1.gateway`` is entered without its app."""
    for folder in ("src", "tests/engine"):
        sys.path.insert(0, str(ROOT / folder))
    try:
        import fastapi  # noqa: F401
    except ImportError:
        package = types.ModuleType("agentr1.gateway")
        package.__path__ = [str(ROOT / "src/agentr1/gateway")]
        sys.modules["agentr1.gateway"] = package
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend

    def local_backend(model_dir: Path, **options: Any) -> Any:
        return LocalBackend(model_dir, EngineOptions(**options))

    return local_backend


def build_random_model(tokenizer_dir: Path, out: Path) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, out / name)
    return out


def random_prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(batch)
    return torch.randint(100, vocab - 100, (batch, length), generator=generator).tolist()


def time_engine(backend: Any, prompts: list[list[int]], tokens: int) -> dict[str, float]:
    from agentr1.core.generation import GenerateRequest, SamplingParams

    requests = [GenerateRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=i))
                for i, p in enumerate(prompts)]

    async def together() -> list[Any]:
        return await asyncio.gather(*(backend.generate(r) for r in requests))

    torch.cuda.synchronize()
    started = time.perf_counter()
    results = asyncio.run(together())
    wall = time.perf_counter() - started
    generated = sum(len(r.output_ids) for r in results)
    return {"wall_s": wall, "tokens": generated, "tokens_per_s": generated / wall}


def time_generate(model: Any, prompts: list[list[int]], tokens: int, **options: Any) -> dict[str, float]:
    ids = torch.tensor(prompts, device="cuda")
    mask = torch.ones_like(ids)
    torch.cuda.synchronize()
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                             do_sample=True, temperature=1.0, top_k=0, top_p=1.0, **options)
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    generated = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    return {"wall_s": wall, "tokens": generated, "tokens_per_s": generated / wall}


def record(out: Path, row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def engine_rows(args: argparse.Namespace, local_backend: Any, model_dir: Path, out: Path, *, compile: bool,
                prefill_budget: int | None = None, overlap: bool = True) -> None:
    """The engine's rows (never cut by --budget-s: they are what is measured). ``prefill_budget``: the
    engine's tokens per prefill forward (None: its default), named in the row when given; ``overlap=False``:
    every decode step read before the next is queued (the engine before its overlap)."""
    name = "agentr1 local" + (" + torch.compile" if compile else "") + ("" if overlap else " (overlap off)")
    if prefill_budget is not None:
        name += f" (prefill budget {prefill_budget})"
    backend = local_backend(model_dir, device="cuda", dtype="bfloat16", max_batch_size=max(args.batches),
                            compile=compile, overlap=overlap, prefill_budget=prefill_budget)
    backend.engine.start()
    phases = timed_phases(backend.engine.batch)
    for batch in args.compile_batches if compile else args.batches:
        prompts = random_prompts(batch, args.prompt, args.vocab)
        started = time.perf_counter()
        time_engine(backend, prompts, args.tokens)  # graph capture (and compilation)
        warm_up_s = round(time.perf_counter() - started, 1)
        for phase in phases.values():
            phase.update(calls=0, seconds=0.0, rows=[])
        row = time_engine(backend, prompts, args.tokens)
        split: dict[str, Any] = {f"{phase}_ms": round(1000 * p["seconds"] / max(1, p["calls"]), 3)
                                 for phase, p in phases.items()}
        split["prefill_calls"] = phases["prefill"]["calls"]
        split["admitted_rows"] = phases["prefill"]["rows"]
        split["decode_calls"] = phases["decode"]["calls"]
        record(out, {"engine": name, "batch": batch, **row, **split, "graph_captures": backend.stats.graph_captures,
                     "warm_up_s": warm_up_s})
    for batch in args.profile if not compile else []:
        profile_batch(backend, random_prompts(batch, args.prompt, args.vocab), args.tokens, out)
    asyncio.run(backend.close())
    del backend
    torch.cuda.empty_cache()


def speed(args: argparse.Namespace, local_backend: Any, model_dir: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM

    engine_rows(args, local_backend, model_dir, out, compile=False)
    if args.overlap_off:
        engine_rows(args, local_backend, model_dir, out, compile=False, overlap=False)
    for budget in args.prefill_budgets:  # the same engine with other prefill chunking, for comparison
        engine_rows(args, local_backend, model_dir, out, compile=False, prefill_budget=budget)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.cuda().eval()
    for name, options in (("generate eager", {}), ("generate static (baseline)", {"cache_implementation": "static"})):
        for batch in args.batches:
            if time.perf_counter() - START > args.budget_s:
                record(out, {"engine": name, "batch": batch, "skipped": "time budget"})
                continue
            prompts = random_prompts(batch, args.prompt, args.vocab)
            time_generate(model, prompts, args.tokens, **options)  # compilation / warm-up
            record(out, {"engine": name, "batch": batch, **time_generate(model, prompts, args.tokens, **options)})
    del model
    torch.cuda.empty_cache()
    if args.compile:
        engine_rows(args, local_backend, model_dir, out, compile=True, prefill_budget=args.compile_prefill_budget)
        if args.overlap_off:
            engine_rows(args, local_backend, model_dir, out, compile=True, prefill_budget=args.compile_prefill_budget,
                        overlap=False)


def timed_phases(engine: Any) -> dict[str, dict[str, Any]]:
    """Wall time per prefill() / decode() call of the engine's worker (GPU work included: each ends
    with a device-to-host transfer)."""
    phases: dict[str, dict[str, Any]] = {}
    for name in ("prefill", "decode"):
        phases[name] = {"calls": 0, "seconds": 0.0}
        original = getattr(engine, name)

        def timed(*a: Any, _original: Any = original, _phase: dict[str, Any] = phases[name]) -> Any:
            if a:  # prefill(rows): how many rows each admission took
                _phase.setdefault("rows", []).append(len(a[0]))
            started = time.perf_counter()
            try:
                return _original(*a)
            finally:
                _phase["calls"] += 1
                _phase["seconds"] += time.perf_counter() - started

        setattr(engine, name, timed)
    return phases


def profile_batch(backend: Any, prompts: list[list[int]], tokens: int, out: Path) -> None:
    """torch.profiler over one batch (host ops of every thread, GPU kernels): the tables of where the
    host and the device spend it (printed) and a gzipped Chrome trace beside ``out``."""
    import gzip

    from profiling import every_thread_profiler, print_tables

    with every_thread_profiler() as prof:
        row = time_engine(backend, prompts, tokens)
    record(out, {"profile": len(prompts), **row})
    print_tables(prof)
    trace = out.parent / f"engine_trace_b{len(prompts)}.json"
    prof.export_chrome_trace(str(trace))
    with trace.open("rb") as f, gzip.open(f"{trace}.gz", "wb") as z:
        shutil.copyfileobj(f, z)
    trace.unlink()


def exactness(tokenizer_dir: Path, work: Path, out: Path) -> None:
    from test_engine_exactness import (
        check_a_smaller_batch_replays_a_wider_graph,
        check_logprobs_match_a_plain_forward,
        check_prefix_reuse_is_exact,
        check_weight_sync_reaches_cached_prefixes,
    )
    from test_engine_overlap import check_overlap_samples_what_reading_every_step_samples
    from test_one_token_attention import check_one_token_attention_matches_sdpa

    from agentr1.core.models import build_tiny_random_model

    tiny = build_tiny_random_model(work / "tiny", base=tokenizer_dir)
    other = build_tiny_random_model(work / "other", base=tokenizer_dir, seed=9)
    checks = {
        "decode attention matches SDPA (bfloat16)": lambda: check_one_token_attention_matches_sdpa("cuda", torch.bfloat16),
        "decode attention matches SDPA (float32)": lambda: check_one_token_attention_matches_sdpa("cuda", torch.float32),
        "logprobs match a plain forward (float32, 12 batched requests)":
            lambda: check_logprobs_match_a_plain_forward(tiny, "cuda"),
        "a smaller batch replays a wider captured graph, logprobs match a plain forward":
            lambda: check_a_smaller_batch_replays_a_wider_graph(tiny, "cuda"),
        "prefix reuse: same ids, logprobs within 2e-3, prefill <= 1.3x (8 turns)":
            lambda: check_prefix_reuse_is_exact(tiny, "cuda", bit_exact=False),
        "prefix reuse: logprobs bit-exact": lambda: check_prefix_reuse_is_exact(tiny, "cuda", bit_exact=True),
        "weight sync drops prefixes, matches a fresh engine":
            lambda: check_weight_sync_reaches_cached_prefixes(tiny, other, "cuda"),
        "overlap: same ids, stops and top alternatives as reading every step, logprobs within 2e-3":
            lambda: check_overlap_samples_what_reading_every_step_samples(tiny, "cuda"),
    }
    for name, check in checks.items():
        try:
            check()
            record(out, {"check": name, "passed": True})
        except Exception as exc:  # report every check
            record(out, {"check": name, "passed": False, "error": f"{type(exc).__name__}: {exc}"[:500]})


START = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2's tokenizer + config directory")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/engine-bench"))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128, 256])
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--budget-s", type=float, default=420.0, help="skip generate() baseline runs after this")
    parser.add_argument("--skip", nargs="*", default=[], choices=["speed", "exactness"])
    parser.add_argument("--profile", type=int, nargs="*", default=[],
                        help="torch.profiler over the default engine's run of these batches (after its rows)")
    parser.add_argument("--compile", action="store_true", help="also run the engine with torch.compile (last)")
    parser.add_argument("--compile-batches", type=int, nargs="+", default=[128, 1])
    parser.add_argument("--compile-prefill-budget", type=int, default=None,
                        help="the compiled engine's tokens per prefill forward (default: the engine's)")
    parser.add_argument("--prefill-budgets", type=int, nargs="*", default=[],
                        help="also run the engine with these tokens per prefill forward")
    parser.add_argument("--overlap-off", action="store_true",
                        help="also run each engine with overlap off (every decode step read before the next)")
    parser.add_argument("--vocab", type=int, default=49152)
    args = parser.parse_args()
    local_backend = import_engine()
    args.work.mkdir(parents=True, exist_ok=True)
    record(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "transformers": __import__("transformers").__version__})
    if "exactness" not in args.skip:
        exactness(args.tokenizer, args.work, args.out)
    if "speed" not in args.skip:
        speed(args, local_backend, build_random_model(args.tokenizer, args.work / "random-smollm2"), args.out)


if __name__ == "__main__":
    main()
