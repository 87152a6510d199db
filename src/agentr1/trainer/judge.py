"""LLM-as-judge rewards: a rubric prompt, a judge model behind an OpenAI-compatible gateway, a
strictly parsed score, a cache and a budget.

The judge is a reward function (``reward.judge`` in the job; it runs with ``reward.functions`` in
the reward stage): ``Judge(config, store, run_id)(session, task)`` returns the session's score
(``mode: outcome``) or one score per trainable step (``mode: process``), each in [0, 1].

- Call path: the judge model is reached over HTTP through ``reward.judge.base_url``: a second
  agentr1 gateway serving it (``agentr1 gateway --model ...``: that gateway records the call in its
  own store like any call), or any OpenAI-compatible endpoint, e.g. an agentr1 gateway whose
  backend is LiteLLM in front of a provider.
- Recording: every call made is also recorded in the training store as a session of run
  ``<run_id>-judge`` whose metadata links it to the judged session (``judge_of``, ``judge_step``)
  and whose one step is marked not trainable (``backend: judge``, no token ids, the text in
  ``action.content``, the rubric messages in ``messages_sent``): the policy never trains on it.
- Prompt: the rubric (``rubric``, a template over {task} {reference} {answer} {max_score} {step}),
  after the few-shot ``examples`` if any (the rubric filled with each, answered ``SCORE: <n>``).
- Parsing: the reply must hold exactly one line ``SCORE: <number>`` with the number in
  [0, ``max_score``]. Anything else (no such line, two of them, out of range, the judge
  unreachable) raises :class:`JudgeFailure`: the reward stage records it for the session
  (``SessionRewards.failures``) and the session is not trained on, never scored 0 silently.
- Cache: the same judge input (model, messages) is never sent twice in a run; results (scores
  and parse failures) are cached in memory and rebuilt from the recorded judge sessions on resume.
- Budget: ``max_calls`` judge calls per run (cache hits are free); past it ``over_budget: error``
  stops the run with :class:`JudgeBudgetExceeded`, ``skip`` records a judge failure for the session.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter
from typing import Any

from agentr1.store import Action, SessionRecord, StepRecord, TraceStore, new_step
from agentr1.trainer.config import RUBRIC_FIELDS, JudgeConfig, check_rubric
from agentr1.trainer.rewards import RewardError, is_trainable_step

__all__ = ["DEFAULT_RUBRIC", "Judge", "JudgeBudgetExceeded", "JudgeFailure", "parse_score", "render_rubric"]

DEFAULT_RUBRIC = (
    "Grade the assistant's answer to the task. Give {max_score} when it is fully correct and complete, "
    "0 when it is wrong or missing, something in between for a partly correct answer.\n\n"
    "Task:\n{task}\n\nReference answer (may be empty):\n{reference}\n\nAssistant's answer:\n{answer}\n\n"
    "Reply with exactly one line: SCORE: <a number from 0 to {max_score}>")
_SCORE_LINE = re.compile(r"^\s*SCORE:\s*([+-]?\d+(?:\.\d+)?)\s*$", re.IGNORECASE)


class JudgeFailure(RuntimeError):
    """The judge gave no usable score (unparseable reply, unreachable judge, over budget with ``skip``)."""


class JudgeBudgetExceeded(RewardError):
    """More judge calls than ``reward.judge.max_calls`` with ``over_budget: error``."""


def render_rubric(template: str, **fields: Any) -> str:
    return template.format(**{k: fields.get(k, "") for k in RUBRIC_FIELDS})


def parse_score(text: str, max_score: float) -> float:
    """The score in ``text`` scaled to [0, 1]; :class:`JudgeFailure` unless exactly one ``SCORE:`` line
    holds a number in [0, max_score]."""
    found = [m.group(1) for line in (text or "").splitlines() if (m := _SCORE_LINE.match(line))]
    if len(found) != 1:
        raise JudgeFailure(f"unparseable judge reply ({len(found)} 'SCORE: <number>' lines): {text[:200]!r}")
    value = float(found[0])
    if not 0.0 <= value <= max_score:
        raise JudgeFailure(f"judge score {value} is outside [0, {max_score}]: {text[:200]!r}")
    return value / max_score


def _task_text(task: Any) -> str:
    if isinstance(task, dict):
        for key in ("question", "prompt"):
            if isinstance(task.get(key), str) and task[key]:
                return str(task[key])
        if isinstance(task.get("prompt"), list):
            return "\n".join(str(m.get("content") or "") for m in task["prompt"] if isinstance(m, dict))
    return json.dumps(task, default=str)[:4000]


def _reference(task: Any) -> str:
    if not isinstance(task, dict):
        return ""
    reward_model = task.get("reward_model") if isinstance(task.get("reward_model"), dict) else {}
    value = task.get("answer", reward_model.get("ground_truth", ""))
    return "" if value is None else str(value)


class Judge:
    """A reward function ``(session, task) -> float | {step index: float}`` scored by a judge model."""

    source = "judge"  # the reward stage stores its rewards with this source

    def __init__(self, config: JudgeConfig, store: TraceStore, run_id: str, *, client: Any = None) -> None:
        self.config = config
        self.store = store
        self.judge_run = f"{run_id}-judge"
        self.rubric = config.rubric or DEFAULT_RUBRIC
        check_rubric(self.rubric)
        self.client = client
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.cache: dict[str, tuple[float | None, str | None]] = {}  # key -> (score, failure)
        self.calls = 0
        for s in store.list_sessions(self.judge_run, limit=1_000_000):  # a resumed run keeps cache and budget
            meta = s.metadata
            if meta.get("called"):
                self.calls += 1
            if "cache_key" in meta and meta.get("cacheable", True):
                self.cache[meta["cache_key"]] = (meta.get("score"), meta.get("failure"))

    # -- the reward function ---------------------------------------------------------------

    def __call__(self, session: SessionRecord, task: Any) -> float | dict[int, float]:
        steps = [s for s in sorted(session.steps, key=lambda s: s.index) if is_trainable_step(s)]
        if self.config.mode == "outcome":
            final = steps[-1] if steps else (session.steps[-1] if session.steps else None)
            return self._score(session, None, task, str((final.action if final else {}).get("content") or ""))
        return {s.index: self._score(session, s, task, str(s.action.get("content") or "")) for s in steps}

    def take_metrics(self) -> dict[str, float]:
        counts, self.counts = self.counts, Counter()
        return {f"judge/{k}": float(counts[k]) for k in ("calls", "cache_hits", "failures", "over_budget")}

    # -- one judgement ---------------------------------------------------------------------

    def _messages(self, session: SessionRecord, step: StepRecord | None, task: Any, answer: str) -> list[dict]:
        top = f"{self.config.max_score:g}"
        messages: list[dict] = []
        for example in self.config.examples:  # few-shot turns: the rubric filled in, answered in the format
            messages += [{"role": "user", "content": render_rubric(self.rubric, task=example.task or _task_text(task),
                                                                   reference=example.reference, answer=example.answer,
                                                                   max_score=top, step="")},
                         {"role": "assistant", "content": f"SCORE: {example.score:g}"}]
        prompt = render_rubric(self.rubric, task=_task_text(task), reference=_reference(task), answer=answer,
                               max_score=top, step="" if step is None else step.index)
        return [*messages, {"role": "user", "content": prompt}]

    def _score(self, session: SessionRecord, step: StepRecord | None, task: Any, answer: str) -> float:
        messages = self._messages(session, step, task, answer)
        key = hashlib.sha256(json.dumps([self.config.model, self.config.max_score, messages],
                                        sort_keys=True).encode()).hexdigest()
        with self._lock:
            cached = self.cache.get(key)
            if cached is None:
                if self.config.max_calls is not None and self.calls >= self.config.max_calls:
                    self.counts["over_budget"] += 1
                    message = (f"judge budget spent: {self.calls} calls of reward.judge.max_calls="
                               f"{self.config.max_calls} in run {self.judge_run}")
                    if self.config.over_budget == "error":
                        raise JudgeBudgetExceeded(message)
                    self.counts["failures"] += 1
                    raise JudgeFailure(message)
                self.calls += 1  # reserved before the call: concurrent scorers never overspend
        if cached is not None:
            self.counts["cache_hits"] += 1
            score, failure = cached
        else:
            score, failure = self._call(session, step, messages, key)
        if failure is not None:
            self.counts["failures"] += 1
            raise JudgeFailure(failure)
        assert score is not None
        return self.config.weight * score

    def _call(self, session: SessionRecord, step: StepRecord | None, messages: list[dict], key: str
              ) -> tuple[float | None, str | None]:
        cfg = self.config
        self.counts["calls"] += 1
        started = time.monotonic()
        text, finish, remote, failure, cacheable = "", None, None, None, True
        try:
            reply = self._client().chat.completions.create(model=cfg.model, messages=messages,
                                                           temperature=cfg.temperature, max_tokens=cfg.max_tokens)
            choice = reply.choices[0]
            text, finish = choice.message.content or "", choice.finish_reason
            remote = (reply.model_extra or {}).get("agentr1")
        except Exception as exc:  # the judge unreachable or failing: a failure of this judgement, not a 0
            failure, cacheable = f"judge call failed: {type(exc).__name__}: {exc}", False
        score = None
        if failure is None:
            try:
                score = parse_score(text, cfg.max_score)
            except JudgeFailure as exc:
                failure = str(exc)
        self._record(session, step, messages, text, finish, remote, key, score, failure, cacheable,
                     latency_ms=(time.monotonic() - started) * 1000)
        if cacheable:
            with self._lock:
                self.cache[key] = (score, failure)
        return score, failure

    def _client(self) -> Any:
        if self.client is None:
            import openai

            self.client = openai.OpenAI(base_url=self.config.base_url, api_key=self.config.api_key or "none",
                                        max_retries=0, timeout=self.config.timeout_s)
        return self.client

    def _record(self, session: SessionRecord, step: StepRecord | None, messages: list[dict], text: str,
                finish: str | None, remote: Any, key: str, score: float | None, failure: str | None,
                cacheable: bool, *, latency_ms: float) -> None:
        """The judge's call as a session of the judge run, linked to the judged session, one untrainable step."""
        cfg = self.config
        metadata = {"judge_of": session.id, "judge_step": None if step is None else step.index, "judge": cfg.name,
                    "cache_key": key, "cacheable": cacheable, "called": True, "score": score, "failure": failure,
                    "remote": remote, "base_url": cfg.base_url}
        sid = self.store.create_session(run_id=self.judge_run, task_id=session.task_id, metadata=metadata)
        self.store.append_steps([new_step(
            sid, 0, Action(text), model=cfg.model, backend="judge", finish_reason=finish, latency_ms=latency_ms,
            sampling={"temperature": cfg.temperature, "max_new_tokens": cfg.max_tokens}, messages_sent=messages,
            messages_seen=messages)])
        self.store.finish_session(sid, status="failed" if failure else "finished",
                                  error=f"judge: {failure}" if failure else None)
