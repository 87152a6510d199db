"""A measured on-policy distillation run: the ``opd.yaml`` recipe through the real trainer loop.

The student is the teacher with seeded noise on its weight matrices (``perturbed_student``); the
trainer runs as ``agentr1 train`` does: the student samples through the real gateway (embedded
LocalBackend), the sessions land in SQLite, the teacher (``LocalTeacher``) scores exactly the
sampled tokens, ``algorithm.distill.alone`` makes ``teacher_logp - student_logp`` each token's
advantage and verl's FSDP engine updates the student, whose weights are then synced to the gateway.
Before training and after every update the served student is measured against the teacher on
held-out prompts (``HeldOutAgreement``: exact reverse KL and greedy agreement).

    .venv/bin/python -m examples.distill.run_opd                      # SmolLM2 teacher, CPU, 6 updates
    .venv/bin/python -m examples.distill.run_opd --device cuda --steps 20 --batch 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RECIPE = Path(__file__).with_name("opd.yaml")


def opd_config(work: Path, *, student: Path, teacher: Path, steps: int, batch: int, n: int, lr: float,
               max_tokens: int, device: str, seed: int, seeded: bool = False) -> Any:
    """``opd.yaml`` with this run's student, teacher, paths and sizes (fixed tasks, no validation set)."""
    from examples.distill.tasks import make_tasks

    from agentr1.trainer.config import JobConfig, load_yaml

    tasks_file = work / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in make_tasks("train", steps * batch, seed,
                                                                              max_tokens=max_tokens, seeded=seeded)))
    raw = load_yaml(RECIPE)
    raw["db"] = f"sqlite:///{work / 'traces.db'}"
    raw["data"] = {"train_files": [str(tasks_file)], "train_batch_size": batch, "shuffle": False}
    raw["algorithm"]["distill"]["teacher"] = str(teacher)
    raw["actor_rollout_ref"]["model"] = str(student)
    raw["actor_rollout_ref"]["rollout"]["n"] = n
    raw["actor_rollout_ref"]["actor"]["optim"]["lr"] = lr
    raw["trainer"].update(total_training_steps=steps, default_local_dir=str(work / "train"), device=device,
                          seed=seed, resume=False)
    return JobConfig.model_validate(raw)


def run_opd(work: Path, *, teacher: str = "smollm2", noise: float = 0.1, steps: int = 6, batch: int = 8,
            n: int = 2, lr: float = 5e-5, max_tokens: int = 16, held_out_tokens: int = 24,
            held_out: list[str] | None = None, device: str = "cpu", seed: int = 0,
            seeded: bool = False) -> dict[str, Any]:
    """Run OPD in ``work``; returns the held-out measurements before and after each update and the
    trainer's per-step metrics. ``seeded``: every training task is sampled under a seed of its own, so
    that the run is the same draw each time (then ``n`` must be 1: a task's samples would be one)."""
    if seeded and n != 1:
        raise ValueError(f"seeded sampling gives every sample of a task the same tokens: use n=1, not n={n}")
    import torch
    from examples.distill.tasks import HELD_OUT
    from transformers import AutoModelForCausalLM

    from agentr1.core.models import resolve_model
    from agentr1.trainer.distill_eval import HeldOutAgreement, perturbed_student
    from agentr1.trainer.loop import Trainer

    started = time.perf_counter()
    teacher_path = resolve_model(teacher)
    student = perturbed_student(teacher_path, work / "student", noise=noise, seed=seed)
    reference = HeldOutAgreement(teacher_path, held_out or HELD_OUT, max_new_tokens=held_out_tokens)
    held = [{"step": 0, **reference.measure(student)}]
    trainer = Trainer(opd_config(work, student=student, teacher=teacher_path, steps=steps, batch=batch, n=n, lr=lr,
                                 max_tokens=max_tokens, device=device, seed=seed, seeded=seeded),
                      quiet=True)
    trainer.setup()
    end_step = trainer.end_step
    probe = AutoModelForCausalLM.from_pretrained(student, dtype=torch.float32).eval()  # gets the policy's weights

    def measure_policy() -> dict[str, float]:
        """The held-out measure of the weights the policy holds now (those just synced to serving)."""
        missing, unexpected = probe.load_state_dict(trainer.run.policy.state_dict_for_serving(copy=False), strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:  # lm_head may be tied to the embeddings
            raise RuntimeError(f"the policy's weights do not fit the student: missing {missing}, unexpected {unexpected}")
        return reference.measure(probe)

    async def measured_end_step(step: int, metrics: dict[str, float]) -> None:
        measured = await asyncio.to_thread(measure_policy)
        held.append({"step": step, **measured})
        metrics.update({f"heldout/{k}": v for k, v in measured.items() if k != "positions"})
        await end_step(step, metrics)

    trainer.end_step = measured_end_step  # type: ignore[method-assign]
    trainer_started = time.perf_counter()
    try:
        trainer.train()
    finally:
        trainer.close()
    history = [json.loads(line) for line in (work / "train" / "metrics.jsonl").read_text().splitlines()]
    return {"held_out": held, "train": [{k: h[k] for k in ("step", "distill/reverse_kl", "distill/tokens",
                                                            "perf/step_s") if k in h} for h in history if h["step"] > 0],
            "train_s": time.perf_counter() - trainer_started, "total_s": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", default="smollm2", help="smollm2 | a HF model directory")
    parser.add_argument("--noise", type=float, default=0.1, help="student = teacher + noise x std per matrix")
    parser.add_argument("--steps", type=int, default=6, help="OPD updates")
    parser.add_argument("--batch", type=int, default=8, help="tasks per update")
    parser.add_argument("--n", type=int, default=2, help="samples per task")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens the student samples per task")
    parser.add_argument("--held-out-tokens", type=int, default=24, help="teacher continuation per held-out prompt")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeded", action="store_true", help="sample each task under a seed of its own (needs --n 1)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    for name in ("steps", "batch", "n", "max_tokens", "held_out_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lr <= 0 or args.noise <= 0:
        parser.error("--lr and --noise must be > 0")
    if args.seeded and args.n != 1:
        parser.error("--seeded needs --n 1 (a task's samples would all be the same draw)")
    options = {k: v for k, v in vars(args).items() if k != "json"}
    with tempfile.TemporaryDirectory(prefix="agentr1-opd-") as tmp:
        result = run_opd(Path(tmp), **options)
    result["options"] = options
    for h in result["held_out"]:
        print(f"step {h['step']}: held-out reverse KL {h['reverse_kl']:.3f}, agreement {h['agreement']:.3f}, "
              f"p(teacher's token) {h['teacher_top_prob']:.3f} ({h['positions']:.0f} positions)")
    first, last = result["held_out"][0], result["held_out"][-1]
    print(f"reverse KL {first['reverse_kl']:.3f} -> {last['reverse_kl']:.3f} "
          f"({100 * (last['reverse_kl'] / first['reverse_kl'] - 1):+.1f}%), agreement {first['agreement']:.3f} -> "
          f"{last['agreement']:.3f}, p(teacher's token) {first['teacher_top_prob']:.3f} -> "
          f"{last['teacher_top_prob']:.3f}; training {result['train_s']:.0f} s, total {result['total_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
