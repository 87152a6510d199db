"""Warm-start data for Qwen2.5-Coder in its own format (issue 59): the recipes' experts give their turns as OpenAI
messages, and the replay renders them with the policy's own renderer (Qwen's chat template), so the demonstrations'
ids are Qwen's ``<tool_call>`` tags, the format its template asks for and its default parser (hermes_json) reads
first; the gateway parses back exactly the expert's calls."""

from __future__ import annotations

import json

import pytest
from examples.calculator.sft_demos import demonstrations as calculator_demonstrations
from examples.chains.expert import demonstrations as chains_demonstrations
from examples.gsm8k.expert import demonstrations as gsm8k_demonstrations
from transformers import AutoTokenizer

from agentr1.store import TraceStore
from agentr1.trainer.sft.replay import replay_demonstrations

RECIPES = {
    "chains": lambda: chains_demonstrations(2, size="short"),
    "calculator": lambda: calculator_demonstrations(2),
    "gsm8k": lambda: gsm8k_demonstrations(2, seed=0),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_expert_calls_replay_as_qwen_tool_call_tags(recipe, tmp_path, tiny_qwen_path):
    demos = RECIPES[recipe]()
    db = str(tmp_path / "demos.db")
    report = replay_demonstrations(demos, model=tiny_qwen_path, db=db, run_id="demos")
    assert (report.finished, report.failed) == (len(demos), 0), report.errors
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen_path)
    with TraceStore.open(db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions("demos")]
    calls_seen = 0
    for session in sessions:
        demo = next(d for d in demos if d.task_id == session.task_id)
        for step, turn in zip(session.steps, demo.actions, strict=True):
            assert step.action["parser"] == "hermes_json"
            expert_calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                            for c in turn.get("tool_calls") or []]
            parsed = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                      for c in step.action.get("tool_calls") or []]
            assert parsed == expert_calls
            text = tokenizer.decode(step.action_ids)
            tagged = "".join(f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
                             for name, arguments in expert_calls)
            if expert_calls:  # Qwen's template writes calls after the content, each in its own tags
                assert text.endswith(tagged + "<|im_end|>"), text
                calls_seen += len(expert_calls)
    assert calls_seen >= 2
