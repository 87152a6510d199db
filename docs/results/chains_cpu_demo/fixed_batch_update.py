"""One GRPO update of LocalPolicyEngine on a fixed synthetic batch (16 rows like the demo's: 4 groups x 4,
~258-token shared prompt, ~100-110-token responses with a feedback gap); prints peak RSS, metrics, a hash of the weights.

    OMP_NUM_THREADS=1 .venv/bin/python docs/results/chains_cpu_demo/fixed_batch_update.py '{"gradient_checkpointing": true}'
(a second argument: two updates). Results of 2026-12-01: memory_fixed_batch.jsonl."""
import hashlib
import json
import resource
import sys
import threading
import time

import psutil
import torch

from agentr1.core import resolve_model
from agentr1.trainer.engine import LocalPolicyEngine
from agentr1.trainer.rows import Segment, TrainRow

overrides = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
TWO = len(sys.argv) > 2
proc = psutil.Process()
peak = [0]
marks = []
def sampler():
    while True:
        peak[0] = max(peak[0], proc.memory_info().rss)
        time.sleep(0.02)
threading.Thread(target=sampler, daemon=True).start()
def mark(name):
    marks.append((name, round(proc.memory_info().rss / 2**30, 2), round(peak[0] / 2**30, 2)))

g = torch.Generator().manual_seed(0)
rows = []
for group in range(4):
    prompt = torch.randint(100, 49000, (258 + 7 * group,), generator=g).tolist()
    for k in range(4):
        a1 = 30 + int(torch.randint(0, 15, (1,), generator=g))
        fb = 20
        a2 = 30 + int(torch.randint(0, 15, (1,), generator=g))
        resp = torch.randint(100, 49000, (a1 + fb + a2,), generator=g).tolist()
        mask = [1] * a1 + [0] * fb + [1] * a2
        adv = 1.0 if k % 2 == 0 else -1.0
        rows.append(TrainRow(prompt_ids=prompt, response_ids=resp, response_mask=mask, old_logprobs=[0.0] * len(resp),
                             token_rewards=[0.0] * len(resp), segments=[Segment(0, 0, a1), Segment(1, a1 + fb, len(resp))],
                             session_id=f"s{group}{k}", group_id=f"g{group}", advantages=[adv * m for m in mask],
                             has_old_logprobs=False))
mark("start")
cfg = dict(lr=3e-5, ppo_mini_batch_size=4, ppo_max_token_len_per_gpu=2048, device="cpu", seed=42)
cfg.update(overrides)
engine = LocalPolicyEngine(resolve_model("smollm2"), **cfg)
mark("engine built")
t = time.perf_counter()
c = time.process_time()
metrics = engine.update(rows)
mark("after update 1")
metrics2 = engine.update(rows) if TWO else {}
mark("after update 2")
wall, cpu = time.perf_counter() - t, time.process_time() - c
h = hashlib.sha256()
for _name, tensor in engine.actor.named_tensors():
    h.update(tensor.float().contiguous().numpy().tobytes())
print(json.dumps({"overrides": overrides, "marks": marks, "ru_maxrss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                  "update_wall_s": round(wall, 1), "ru": {k: getattr(resource.getrusage(resource.RUSAGE_SELF), k) for k in ("ru_utime", "ru_stime", "ru_minflt")}, "update_cpu_s": round(cpu, 1), "weights_sha": h.hexdigest()[:16],
                  "metrics1": {k: metrics[k] for k in sorted(metrics) if not k.startswith("perf/")},
                  "metrics2": {k: metrics2[k] for k in sorted(metrics2) if not k.startswith("perf/")}}, indent=1))
