"""Local engine throughput: generated tokens per second of concurrent chat sessions, this engine
against an earlier commit's engine (and plain HF ``generate``), all in one run.

    .venv/bin/python bench/local_engine_bench.py                       # SmolLM2, 1 and 8 concurrent
    .venv/bin/python bench/local_engine_bench.py --model tiny --concurrency 1 4 16
    .venv/bin/python bench/local_engine_bench.py --concurrency 16 --turns 3 --threads 1 --before 621589b
    .venv/bin/python bench/local_engine_bench.py --tokens 64 --device cuda --concurrency 1 32 128
    .venv/bin/python bench/local_engine_bench.py --system-tokens 232 --turns 3 --tokens 32 --concurrency 16 32 --before 52c035a
    .venv/bin/python bench/local_engine_bench.py --system-tokens 232 --turns 3 --tokens 32 --concurrency 48 --inexact --bfloat16

Each session is a chat of its own, sampled at temperature 1 with a seed, up to --tokens new
tokens per turn (it may stop earlier at <|im_end|>; only generated tokens count). With --turns N
every session runs N turns, each prompt extending the previous prompt + sampled ids with a new
user message (what an agent sends through the gateway). ``--system-tokens N`` starts every session with
the same system message of about N tokens (an agent's instructions and tool schemas, which its sessions
share: 232 of the first prompt's 260 tokens in the chains demo). ``--before COMMIT`` also runs the
local engine as it was at COMMIT (its backend files are read from git into a temporary package),
alternating with this one --repeat times; the best run of each is shown. Prints a markdown table:
wall time, total tokens/s, per-session tokens/s, prompt tokens prefilled, the engine's wall seconds in admissions
(prefill forwards and their first tokens; engines before 2026-12-06 do not count them), forward passes, the CPU
seconds this process used and the machine's load average when the run began (on a shared machine,
a load above the core count means the numbers are lower bounds). --baseline adds plain HF
``model.generate`` on the first turn's prompts (its rows ending at the same end tokens, the tokens up to them counted). ``--model-forward`` adds this
tree's engine with ``flat_forward=False``: every prefill and decode step through the model's forward.
``--profile`` ends with one more run of this tree's engine at the largest concurrency under torch.profiler
and prints its ops by host time.

``--contend 0 1`` runs everything once per condition: with 0, then 1 competing busy process that the bench
itself starts for the duration of that condition's runs (a pure-Python busy loop, as another program on the
same laptop would be: an agent, a tool, a test run), so the engine and ``generate`` meet the same machine;
``--busy-nice 15`` runs them niced (a background build, a ``nice``d test run).
``--threads 0`` (the default) leaves the engine's CPU threads to the engine (``cpu_threads.py``) and
``generate`` on torch's default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import importlib
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from agentr1.core import release_openmp_threads
from agentr1.core.models import resolve_model
from agentr1.engine.rows import end_token_ids
from agentr1.gateway.backends import LocalBackend

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_THREADS = torch.get_num_threads()  # torch's default, before anything changes it

QUESTIONS = [
    "Explain why the sky is blue.",
    "Write a short poem about the sea.",
    "What is 12*7? Show your steps.",
    "List three uses of a paperclip.",
    "Describe a cat to someone who has never seen one.",
    "How do I boil an egg?",
    "Summarise the plot of a fairy tale.",
    "Give advice for a first job interview.",
]


def engine_at(commit: str) -> Any:
    """The ``local`` backend module of ``commit``, imported from git as a package of its own: the backends folder's
    files, and since the engine became a part of its own (issue 38) the engine's package beside them."""
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    package = f"agentr1_engine_{sha}"
    folder = Path(tempfile.mkdtemp()) / package
    folder.mkdir()
    (folder / "__init__.py").write_text("")

    def copy(tree: str, into: Path, keep: Any) -> None:
        names = subprocess.run(["git", "ls-tree", "--name-only", f"{sha}:{tree}"], cwd=ROOT, capture_output=True,
                               text=True).stdout.split()
        for name in filter(keep, names):
            source = subprocess.run(["git", "show", f"{sha}:{tree}/{name}"], cwd=ROOT, check=True,
                                    capture_output=True, text=True).stdout
            (into / name).write_text(source.replace("from agentr1.engine import", "from .engine import"))

    # the package's own __init__ imports every backend
    copy("src/agentr1/gateway/backends", folder, lambda name: name.endswith(".py") and name != "__init__.py")
    (folder / "engine").mkdir()
    copy("src/agentr1/engine", folder / "engine", lambda name: name.endswith(".py"))
    sys.path.insert(0, str(folder.parent))
    return importlib.import_module(f"{package}.local")


SYSTEM_LINE = ("You are a careful assistant with tools. Call one tool at a time, read its result, and answer "
               "only when you are sure. ")


def system_message(tokenizer: Any, tokens: int) -> list[dict[str, str]]:
    """A system message of about ``tokens`` tokens (none for 0): the same for every session."""
    if tokens <= 0:
        return []
    ids = tokenizer.encode(SYSTEM_LINE * (tokens // 10 + 1), add_special_tokens=False)[:tokens]
    return [{"role": "system", "content": tokenizer.decode(ids)}]


def first_prompts(tokenizer: Any, sessions: int, system_tokens: int = 0) -> list[list[int]]:
    system = system_message(tokenizer, system_tokens)
    out = []
    for i in range(sessions):
        text = QUESTIONS[i % len(QUESTIONS)] + (f" (variant {i})" if i >= len(QUESTIONS) else "")
        out.append(tokenizer.apply_chat_template([*system, {"role": "user", "content": text}],
                                                 add_generation_prompt=True, tokenize=True, return_dict=False))
    return out


def follow_up(tokenizer: Any, turn: int) -> list[int]:
    """The ids that close the assistant turn and add a user message (ChatML)."""
    text = f"<|im_end|>\n<|im_start|>user\nThanks. Now say more about point {turn}.<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer.encode(text, add_special_tokens=False)


async def sessions_run(backend: Any, module: Any, sessions: int, turns: int, tokens: int,
                       system_tokens: int = 0) -> dict[str, float]:
    """``sessions`` concurrent sessions of ``turns`` turns each on ``backend``, whose request types ``module``
    provides (:func:`vocabulary_of`)."""
    tokenizer = engine_of(backend).tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def session(i: int, prompt: list[int]) -> int:
        generated = 0
        for turn in range(turns):
            sampling = module.SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=1000 * i + turn)
            result = await backend.generate(module.GenerateRequest(prompt_ids=list(prompt), sampling=sampling))
            generated += len(result.output_ids)
            output = result.output_ids[:-1] if result.output_ids[-1:] == [end] else result.output_ids
            prompt = prompt + output + follow_up(tokenizer, turn)
        return generated

    before = dataclasses.replace(backend.stats)
    load = os.getloadavg()[0]
    cpu, started = time.process_time(), time.perf_counter()
    prompts = first_prompts(tokenizer, sessions, system_tokens)
    counts = await asyncio.gather(*(session(i, p) for i, p in enumerate(prompts)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    generated = sum(counts)
    prefilled = getattr(backend.stats, "prefill_tokens", None)
    prefill_s = getattr(backend.stats, "prefill_s", None)  # engines before 2026-12-06 did not count it
    return {
        "wall_s": wall,
        "tokens": generated,
        "tokens_per_s": generated / wall,
        "per_session_tokens_per_s": generated / sessions / wall,
        "prefilled": "-" if prefilled is None else prefilled - before.prefill_tokens,
        "forwards": backend.stats.forward_passes - before.forward_passes,
        "prefill_s": None if prefill_s is None else prefill_s - before.prefill_s,
        "cpu_s": cpu,
        "load": load,
    }


THIS_TREE, THIS_TREE_BF16 = "local (this tree)", "local (this tree, bfloat16)"


def baseline_of(engine: str) -> str:
    """The ``generate`` row an engine's row is compared with: ``generate`` in the engine's dtype (the bfloat16
    engine against ``generate`` on a bfloat16 model, where both were run; else the float32 one)."""
    return "hf generate (bfloat16)" if engine == THIS_TREE_BF16 else "hf generate"


_PLAIN_MODELS: dict[tuple[str, str], Any] = {}


def plain_model(engine: Any) -> Any:
    """The engine's model as ``from_pretrained`` gives it to a user of ``generate`` (loaded once per bench run): not
    the engine's own, whose linear layers the engine packs for oneDNN on the CPU (``packed_linear.py``)."""
    from transformers import AutoModelForCausalLM

    key = (str(engine.model_path), str(engine.dtype))
    if key not in _PLAIN_MODELS:
        _PLAIN_MODELS[key] = AutoModelForCausalLM.from_pretrained(engine.model_path, dtype=engine.dtype).to(
            engine.device).eval()
    return _PLAIN_MODELS[key]


def hf_generate(backend: Any, sessions: int, tokens: int, system_tokens: int = 0, threads: int = 0
                ) -> dict[str, float]:
    """Plain ``model.generate`` on the first turn's prompts (one left-padded batch), on ``threads`` torch
    threads (0: torch's default, what a user of ``generate`` gets), with the model as transformers loads it. A
    row ends at one of the engine's end tokens, as a session does; the batch runs until every row has (until
    2026-12-06 every row was forced to ``tokens`` new tokens, while the engine's sessions stopped at their end
    token: the engine was timed for fewer tokens in as many steps, 492 against 512 at 16 sessions)."""
    torch.set_num_threads(threads or DEFAULT_THREADS)
    engine = engine_of(backend)
    model = plain_model(engine)
    batch = first_prompts(engine.tokenizer, sessions, system_tokens)
    width = max(len(p) for p in batch)
    pad = engine.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=engine.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=engine.device)
    load = os.getloadavg()[0]
    cpu, started = time.process_time(), time.perf_counter()
    ends = sorted(end_token_ids(model, engine.tokenizer))  # the engine's sessions end at the same tokens
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, eos_token_id=ends,
                             pad_token_id=pad, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    release_openmp_threads()  # a user of generate has no engine beside it, nor the engine a generate
    new = out[:, width:]
    generated = sum(row_tokens(row, ends) for row in new.tolist())
    return {"wall_s": wall, "tokens": generated, "tokens_per_s": generated / wall,
            "per_session_tokens_per_s": generated / sessions / wall, "prefilled": "-", "forwards": new.shape[1],
            "cpu_s": cpu, "load": load, "threads": torch.get_num_threads()}


def row_tokens(row: list[int], ends: list[int]) -> int:
    """The tokens ``generate`` sampled for a row: up to and with its first end token (after it: padding), as the
    engine counts a session's output."""
    for i, token in enumerate(row):
        if token in ends:
            return i + 1
    return len(row)


def busy_loop(niceness: int = 0) -> None:
    """A process that keeps one core busy until it is killed (the competing program of ``--contend``), at
    ``niceness`` (``--busy-nice``: a background build or a ``nice``d test run)."""
    os.nice(niceness)
    n = 0
    while True:
        n = (n + 1) % 1_000_003


@contextlib.contextmanager
def contention(processes: int, niceness: int = 0) -> Iterator[None]:
    """``processes`` busy-loop processes running inside the block, at ``niceness``."""
    context = multiprocessing.get_context("spawn")
    busy = [context.Process(target=busy_loop, args=(niceness,), daemon=True) for _ in range(processes)]
    for process in busy:
        process.start()
    try:
        time.sleep(0.5 if processes else 0)  # they are running before the first measurement
        yield
    finally:
        for process in busy:
            process.kill()
            process.join()


def start(module: Any, args: argparse.Namespace, **options: Any) -> Any:
    # the threads' option is `threads` since EngineOptions became a pydantic model, `num_threads` before
    threads = "threads" if hasattr(getattr(module, "EngineOptions", None), "model_fields") else "num_threads"
    options = {"device": args.device, "max_batch_size": max(args.concurrency), threads: args.threads or None,
               **options}
    if hasattr(module, "EngineOptions"):  # one options object (issue 38)
        backend = module.LocalBackend(resolve_model(args.model), module.EngineOptions(**options))
        backend.engine.start()
    else:
        backend = module.LocalBackend(resolve_model(args.model), **options)
        backend.start_sync()
    return backend


def vocabulary_of(module: Any) -> Any:
    """The module whose request types (``GenerateRequest``, ``SamplingParams``) the backend ``module`` takes: its
    package's ``base`` up to issue 38, ``agentr1.core.generation`` since."""
    base = importlib.import_module(module.__name__.rsplit(".", 1)[0] + ".base")
    return base if hasattr(base, "SamplingParams") else importlib.import_module("agentr1.core.generation")


def engine_of(backend: Any) -> Any:
    """What holds the model, the tokenizer and the CPU threads: the engine (since issue 38), else the backend."""
    return getattr(backend, "engine", backend)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a HF model directory")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per turn")
    parser.add_argument("--turns", type=int, default=1, help="turns per session")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="concurrent sessions")
    parser.add_argument("--repeat", type=int, default=1, help="runs per engine and concurrency (best is shown)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads of the engines and generate (0: the engine's choice, torch's default)")
    parser.add_argument("--contend", type=int, nargs="+", default=[0],
                        help="conditions: this many competing busy processes started by the bench (0 1: quiet, then one)")
    parser.add_argument("--busy-nice", type=int, default=0, help="the nice value of the competing busy processes")
    parser.add_argument("--system-tokens", type=int, default=0, help="a shared system message of about N tokens")
    parser.add_argument("--before", default="", help="also run the local engine of this git commit")
    parser.add_argument("--baseline", action="store_true", help="also time plain HF model.generate")
    parser.add_argument("--inexact", action="store_true",
                        help="also run this tree's engine with exact=False (a call's new prompt tokens in one forward)")
    parser.add_argument("--profile", action="store_true",
                        help="after the runs: one more run of this tree's engine at the largest concurrency under "
                             "torch.profiler, and its op table")
    parser.add_argument("--model-forward", action="store_true",
                        help="also run this tree's engine with flat_forward=False (the model's forward for prefills and "
                             "decode steps; with --bfloat16 in bfloat16 too)")
    parser.add_argument("--bfloat16", action="store_true",
                        help="also run this tree's engine in bfloat16 (with --inexact: exact off too; with --before: "
                             "that commit's engine too)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # for the baseline; the engines' workers set their own
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    engines: dict[str, Any] = {THIS_TREE: sys.modules[LocalBackend.__module__]}
    options: dict[str, dict[str, Any]] = {}
    if args.inexact:
        engines["local (this tree, exact off)"] = engines[THIS_TREE]
        options["local (this tree, exact off)"] = {"exact": False}
    if args.bfloat16:
        name = "local (this tree, bfloat16" + (", exact off)" if args.inexact else ")")
        engines[name] = engines[THIS_TREE]
        options[name] = {"dtype": "bfloat16", **({"exact": False} if args.inexact else {})}
    if args.model_forward:
        for dtype in ("float32", "bfloat16") if args.bfloat16 else ("float32",):
            name = "local (this tree, model forward" + (", bfloat16)" if dtype == "bfloat16" else ")")
            engines[name], options[name] = engines[THIS_TREE], {"dtype": dtype, "flat_forward": False}
    if args.before:
        before = {f"local @ {args.before}": engine_at(args.before)}
        if args.bfloat16:  # the earlier engine in bfloat16 too, beside this tree's
            before[f"local @ {args.before}, bfloat16"] = before[f"local @ {args.before}"]
            options[f"local @ {args.before}, bfloat16"] = {"dtype": "bfloat16"}
        engines = {**before, **engines}
    base = {name: vocabulary_of(module) for name, module in engines.items()}
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{args.threads or torch.get_num_threads()}; {args.turns} turn(s) x up to {args.tokens} tokens per session"
          f"{f', a shared system message of {args.system_tokens} tokens' if args.system_tokens else ''}"
          f"{f'; busy processes at nice {args.busy_nice}' if args.busy_nice else ''}")
    results: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for busy in args.contend:
        with contention(busy, args.busy_nice):
            for _ in range(args.repeat):
                for name, module in engines.items():
                    backend = start(module, args, **options.get(name, {}))  # under the condition: it may look
                    await sessions_run(backend, base[name], 1, 1, 4)  # warm-up
                    for concurrency in args.concurrency:
                        run = await sessions_run(backend, base[name], concurrency, args.turns, args.tokens,
                                                 args.system_tokens)
                        # at the end
                        run["threads"] = getattr(engine_of(backend), "cpu_threads", None) or args.threads or "-"
                        results.setdefault((busy, name, concurrency), []).append(run)
                        if args.baseline and name in (THIS_TREE, THIS_TREE_BF16):  # generate in the same dtype
                            results.setdefault((busy, baseline_of(name), concurrency), []).append(
                                hf_generate(backend, concurrency, args.tokens, args.system_tokens, args.threads))
                    await backend.close()
                    del backend
                    gc.collect()
    if args.profile:
        await profile_run(engines[THIS_TREE], base[THIS_TREE], args)
    print_table(results, args.contend, args.concurrency)


async def profile_run(module: Any, vocabulary: Any, args: argparse.Namespace) -> None:
    """One run of ``module``'s engine at the largest concurrency (after one unprofiled run) under
    torch.profiler: its ops by host time, every thread's (the engine runs on its own worker thread)."""
    from profiling import every_thread_profiler

    backend = start(module, args)
    concurrency = max(args.concurrency)
    await sessions_run(backend, vocabulary, concurrency, args.turns, args.tokens, args.system_tokens)
    prof = every_thread_profiler()
    prof.start()
    run = await sessions_run(backend, vocabulary, concurrency, args.turns, args.tokens, args.system_tokens)
    prof.stop()
    await backend.close()
    print(f"\nprofiled: {concurrency} sessions, {run['tokens_per_s']:.1f} tokens/s under the profiler", flush=True)
    events = prof.key_averages()
    print(events.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60), flush=True)


def print_table(results: dict[tuple[int, str, int], list[dict[str, Any]]], conditions: list[int],
                concurrencies: list[int]) -> None:
    """One row per condition, engine and concurrency: the best run's details, the tokens/s of every run, and
    (beside ``generate``) the ratio to it run by run, with the load average each run began at."""
    print("\n| busy processes | engine | sessions | threads | tokens | wall s | tokens/s (best) | tokens/s all runs | "
          "x generate (run by run, median) | prefilled | prefill s (run by run) | forwards | CPU s | load at start |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|---|")
    for busy in conditions:
        for concurrency in concurrencies:
            for (b, name, c), runs in results.items():
                if (b, c) != (busy, concurrency):
                    continue
                baseline = results.get((busy, baseline_of(name), concurrency)) or results.get(
                    (busy, baseline_of(THIS_TREE), concurrency))
                best = max(runs, key=lambda r: r["tokens_per_s"])
                every = " / ".join(f"{r['tokens_per_s']:.1f}" for r in runs)
                ratio = "-" if baseline is None or name.startswith("hf generate") else ratios_text(
                    [r["tokens_per_s"] / g["tokens_per_s"] for r, g in zip(runs, baseline, strict=False)])
                loads = " / ".join(f"{r['load']:.1f}" for r in runs)
                prefill = " / ".join("-" if r.get("prefill_s") is None else f"{r['prefill_s']:.2f}" for r in runs)
                print(f"| {busy} | {name} | {c} | {best.get('threads', '-')} | {best['tokens']} | {best['wall_s']:.1f} | "
                      f"{best['tokens_per_s']:.1f} | {every} | {ratio} | {best['prefilled']} | {prefill} | {best['forwards']} | "
                      f"{best['cpu_s']:.1f} | {loads} |")

def ratios_text(ratios: list[float]) -> str:
    """Run-by-run ratios to ``generate``, and their median where there are three or more (on a shared VM one pair
    of runs can be 25% off the next: docs/benchmarks.md row 64)."""
    text = " / ".join(f"{r:.2f}" for r in ratios)
    return f"{text} (median {statistics.median(ratios):.2f})" if len(ratios) >= 3 else text


if __name__ == "__main__":
    asyncio.run(main())
