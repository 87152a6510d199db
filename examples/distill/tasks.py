"""Tasks and agent of the OPD recipe (``opd.yaml``, ``bench/opd_run.py``).

The task needs no reward: under ``algorithm.distill.alone`` the teacher's per-token log-probs are
the whole training signal. Held-out prompts ask about other topics in other words, so a measured
improvement there is the student moving toward the teacher, not memorising the training prompts.
"""

from __future__ import annotations

TOPICS = ["the sea", "a cat", "music", "trees", "the moon", "bread", "rain", "a city", "winter", "books",
          "coffee", "a river", "a friend", "the sun", "a train", "flowers"]
HELD_OUT = ["Tell me about mountains.", "Describe a garden.", "What is a computer?", "Write about summer.",
            "Why do birds sing?", "Explain what a library is.", "Give me a tip for cooking rice.",
            "What makes a good teacher?"]


def make_tasks(split: str, n: int, seed: int, max_tokens: int = 16, seeded: bool = False) -> list[dict]:
    """``n`` one-sentence writing prompts cycling through ``TOPICS`` (the same for every ``seed``). With
    ``seeded`` every task also carries a sampling seed of its own (from ``seed`` and its index): a run is then
    the same draw each time, and every sample of one task is the same sample (use one sample per task)."""
    return [{"id": f"{split}-{i}", "question": f"Write one sentence about {TOPICS[i % len(TOPICS)]}.",
             "max_tokens": max_tokens, **({"sampling_seed": seed * 100_003 + i} if seeded else {})}
            for i in range(n)]


def answer(task: dict) -> str:
    """One model call through the gateway, sampled at temperature 1 (the student's own distribution)."""
    from agentr1.sdk import openai_client

    reply = openai_client().chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["question"]}],
        max_tokens=task.get("max_tokens", 16), temperature=1.0, seed=task.get("sampling_seed"))
    return reply.choices[0].message.content or ""
