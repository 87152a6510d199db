"""Helpers of the viewer tests: recording a real store through a real gateway (instant backend with
SmolLM2's real tokenizer and renderer, called by the real openai client), a trainer output folder,
and page helpers for the browser tests."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentr1.viewer import content_height, open_viewer_page

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
RUN_NAME = "calc"
RUN_ID = f"{RUN_NAME}-1767225600"  # the trainer names runs <run_name>-<unix time>
GROUP_ID = f"{RUN_ID}/step1/t-group"
GROUP_REWARDS = (0.0, 0.5, 1.0)


@dataclass
class Recorded:
    gateway_url: str
    db: str
    store: Any
    backend: Any
    tokenizer: Any
    tokenizer_path: Path
    runs_dir: Path
    tool_session: str = ""
    group_sessions: list[str] = field(default_factory=list)
    failed_session: str = ""
    drift_session: str = ""
    window_session: str = ""
    branch_session: str = ""


def scripted_reply(tokenizer: Any):  # type: ignore[no-untyped-def]
    """Answers from the prompt: a calculator call when asked to calculate, the result after a tool
    response, else an echo of the last user message."""

    def reply(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        last = text.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]
        if last.startswith("<tool_response>"):
            return f"The answer is {last.removeprefix('<tool_response>').strip().split()[0]}."
        expression = re.search(r"(\d+\s*[-+*/]\s*\d+)", last)
        if "calculator" in last and expression:
            call = {"name": "calculator", "arguments": {"expression": expression.group(1)}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        return f"echo: {last}"

    return reply


def varied_logprobs(backend_cls: type) -> type:
    """The instant backend, with made-up but deterministic logprobs so the colours have something to show."""

    class VariedLogprobs(backend_cls):  # type: ignore[misc,valid-type]
        async def generate(self, request: Any) -> Any:
            result = await super().generate(request)
            result.logprobs = [-(((t * 2654435761) % 997) / 997.0) ** 3 * 5.0 for t in result.output_ids]
            return result

    return VariedLogprobs


def record_traces(rec: Recorded) -> None:
    import openai

    from agentr1.viewer.chat import calculator

    def new_session(**body: Any) -> tuple[str, openai.OpenAI]:
        created = httpx.post(f"{rec.gateway_url}/sessions", json={"run_id": RUN_ID, **body}).json()
        return created["id"], openai.OpenAI(base_url=created["base_url"], api_key=created["api_key"], max_retries=0)

    def finish(sid: str, **body: Any) -> None:
        httpx.post(f"{rec.gateway_url}/sessions/{sid}/finish", json=body).raise_for_status()

    # a 2-step tool-using conversation: a calculator call, then the answer
    sid, client = new_session(task_id="t-tool")
    messages: list[Any] = [{"role": "system", "content": "You are a careful math assistant."},
                           {"role": "user", "content": "What is 12*7? Use the calculator."}]
    first = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": calculator(json.loads(call.function.arguments)["expression"])}]
    client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
    httpx.post(f"{rec.gateway_url}/sessions/{sid}/rewards", json={"value": 0.2, "name": "format", "step": 0})
    finish(sid, reward=1.0)
    rec.tool_session = sid
    # a task group of 3 samples with different rewards
    for value in GROUP_REWARDS:
        sid, client = new_session(task_id="t-group", group_id=GROUP_ID)
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "What is 2+3?"}])
        finish(sid, reward=value)
        rec.group_sessions.append(sid)
    # a new policy version, a failed session, and one whose agent rewrote its history (drift)
    import asyncio

    asyncio.run(rec.backend.update_weights("unused"))
    sid, client = new_session(task_id="t-fail")
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hello"}])
    finish(sid, status="failed", error="the agent crashed")
    rec.failed_session = sid
    sid, client = new_session(task_id="t-drift")
    history: list[Any] = [{"role": "user", "content": "first question"}]
    reply = client.chat.completions.create(model="policy", messages=history)
    history = [{"role": "user", "content": "an edited first question"},
               reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "and now?"}]
    client.chat.completions.create(model="policy", messages=history)
    finish(sid, reward=0.25)
    rec.drift_session = sid
    rec.window_session = _store_windowed_step(rec)
    rec.branch_session = _record_forked(rec)


def _record_forked(rec: Recorded) -> str:
    """A forked conversation, in a run of its own: turn 1, then two different turn-2 histories (two branches
    from step 0), then turn 3 on the first branch: steps 0, 1 and 3 on branch 0, step 2 on branch 1."""
    import openai

    created = httpx.post(f"{rec.gateway_url}/sessions", json={"run_id": "branch-run", "task_id": "t-fork"}).json()
    client = openai.OpenAI(base_url=created["base_url"], api_key=created["api_key"], max_retries=0)

    def ask(messages: list[Any]) -> Any:
        return client.chat.completions.create(model="policy", messages=messages).choices[0].message.model_dump(
            exclude_none=True)

    turn1 = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    first = ask(turn1)
    main = [*turn1, first, {"role": "user", "content": "Another one?"}]
    second = ask(main)
    ask([*turn1, first, {"role": "user", "content": "Why that one?"}])
    ask([*main, second, {"role": "user", "content": "And a third?"}])
    httpx.post(f"{rec.gateway_url}/sessions/{created['id']}/finish", json={"reward": 1.0}).raise_for_status()
    return str(created["id"])


def _store_windowed_step(rec: Recorded) -> str:
    """A step whose context policy (a sliding window) dropped old turns: what the model saw differs
    from what the agent sent. Written through the store API, in a run of its own."""
    from agentr1.store import StepRecord

    sent = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "an old question"},
            {"role": "assistant", "content": "an old answer"}, {"role": "user", "content": "the new question"}]
    seen = [sent[0], {"role": "user", "content": "[2 earlier messages summarised]"}, sent[3]]
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in seen) + "<|im_start|>assistant\n"
    end = rec.tokenizer.convert_tokens_to_ids("<|im_end|>")
    action = [*rec.tokenizer.encode("Sure.", add_special_tokens=False), end]
    sid = rec.store.create_session(run_id="window-run", task_id="t-window")
    rec.store.append_steps([StepRecord(
        session_id=sid, index=0, observation_ids=rec.tokenizer.encode(text, add_special_tokens=False),
        action_ids=action, action_logprobs=[-0.1] * len(action), messages_sent=sent, messages_seen=seen,
        action={"content": "Sure."}, finish_reason="stop", model="policy", backend="instant")])
    rec.store.finish_session(sid, reward=0.5)
    return sid


def write_trainer_output(runs_dir: Path) -> None:
    """What `agentr1 train` leaves in trainer.default_local_dir: config.json, checkpoints, metrics.jsonl."""
    from agentr1.trainer.tracking import Tracker

    out = runs_dir / "calculator"
    (out / "checkpoints" / "step_4").mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"run_name": RUN_NAME, "algorithm": {"adv_estimator": "grpo"}}))
    (out / "checkpoints" / "step_4" / "trainer_state.json").write_text(
        json.dumps({"run_id": RUN_ID, "step": 4, "sampler_position": 8, "policy_version": 4, "offline_cursor": 0}))
    tracker = Tracker(out, total_steps=6, quiet=True)
    for step in range(1, 7):
        tracker.log(step, {"reward/mean": 0.1 * step + 0.05 * (step % 2), "actor/pg_loss": 0.5 / step - 0.02,
                           "actor/kl": 0.001 * step, "success/val": 0.1 * step, "perf/tokens_per_s": 800.0 + step})
    tracker.close()
    other = runs_dir / "other-job"
    other.mkdir()
    (other / "metrics.jsonl").write_text(json.dumps({"step": 3, "time": 1.0, "reward/mean": 0.75}) + "\n")


def open_page(page: Any, url: str) -> None:
    open_viewer_page(page, url)


def screenshot(page: Any, name: str, *, element: str | None = None) -> Path:
    """Save the page (down to the end of its content), or one element, under test-artifacts/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if element is not None:
        page.locator(element).screenshot(path=str(path))
        return path
    width = page.viewport_size["width"]
    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": max(200, content_height(page))})
    return path


def wait_until(check: Any, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)
