"""The viewer's JSON API over a store recorded through a real gateway."""

from __future__ import annotations

import httpx
import pytest
from viewer_harness import GROUP_ID, GROUP_REWARDS, RUN_ID


def get(url: str, path: str, **params: object) -> dict:
    response = httpx.get(url + path, params=params, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_runs_and_run_detail(recorded, viewer_url):
    runs = get(viewer_url, "/api/runs")
    assert runs["total"] >= 1 and runs["limit"] == 50 and runs["offset"] == 0
    run = next(r for r in runs["items"] if r["id"] == RUN_ID)
    assert run["n_sessions"] == 6 and run["n_steps"] == 8
    detail = get(viewer_url, f"/api/runs/{RUN_ID}")
    assert detail["status_counts"] == {"finished": 5, "failed": 1}
    assert [(v["version"], v["sessions"], v["steps"]) for v in detail["policy_versions"]] == [(0, 4, 5), (1, 2, 3)]
    assert detail["out_dir"].endswith("calculator") and detail["matched_by"] == "run_id"
    series = get(viewer_url, f"/api/runs/{RUN_ID}/metrics")
    assert [p["step"] for p in series["points"]] == [1, 2, 3, 4, 5, 6]
    assert {"reward/mean", "actor/pg_loss", "actor/kl"} <= set(series["keys"])
    groups = get(viewer_url, f"/api/runs/{RUN_ID}/groups")
    group = next(g for g in groups["items"] if g["group_id"] == GROUP_ID)
    assert group["n"] == 3 and group["min_reward"] == 0.0 and group["max_reward"] == 1.0


def test_session_filters_sort_and_pagination(recorded, viewer_url):
    failed = get(viewer_url, "/api/sessions", run=RUN_ID, status="failed")
    assert [s["id"] for s in failed["items"]] == [recorded.failed_session] and failed["total"] == 1
    good = get(viewer_url, "/api/sessions", run=RUN_ID, min_reward=0.5, sort="reward", order="desc")
    assert [s["reward"] for s in good["items"]] == [1.0, 1.0, 0.5]
    ranged = get(viewer_url, "/api/sessions", run=RUN_ID, min_reward=0.1, max_reward=0.6)
    assert sorted(s["reward"] for s in ranged["items"]) == [0.25, 0.5]
    by_steps = get(viewer_url, "/api/sessions", run=RUN_ID, sort="steps", order="desc", limit=2)
    assert [s["n_steps"] for s in by_steps["items"]] == [2, 2] and by_steps["total"] == 6
    second = get(viewer_url, "/api/sessions", run=RUN_ID, sort="created", order="asc", limit=2, offset=2)
    assert [s["id"] for s in second["items"]] == recorded.group_sessions[1:3]
    assert httpx.get(viewer_url + "/api/sessions", params={"status": "bogus"}).status_code == 400
    assert httpx.get(viewer_url + "/api/sessions/nope").status_code == 404


def test_session_detail_tokens_and_mask(recorded, viewer_url):
    stored = recorded.store.get_session(recorded.tool_session)
    detail = get(viewer_url, f"/api/sessions/{recorded.tool_session}")
    assert detail["tokenizer"] == str(recorded.tokenizer_path)
    assert [s["index"] for s in detail["steps"]] == [0, 1]
    first, second = detail["steps"]
    assert first["action"]["tool_calls"][0]["function"]["name"] == "calculator"
    assert first["feedback_messages"][0]["role"] == "tool" and first["feedback_messages"][0]["content"] == "84"
    assert first["reward"] == pytest.approx(0.2) and detail["session"]["reward"] == 1.0
    assert second["extends_previous"] is True and second["action"]["content"] == "The answer is 84."
    for view, step in zip(detail["steps"], stored.steps, strict=True):
        assert [t["id"] for t in view["action_tokens"]] == step.action_ids
        assert [t["text"] for t in view["action_tokens"]] == [recorded.tokenizer.decode([i]) for i in step.action_ids]
        assert [t["logprob"] for t in view["action_tokens"]] == pytest.approx(step.action_logprobs)
    rows = get(viewer_url, f"/api/sessions/{recorded.tool_session}/rows")
    assert rows["source"] == "trainer" and len(rows["rows"]) == 1  # step 1 extends step 0: one merged row
    row = rows["rows"][0]
    step0, step1 = stored.steps
    assert [t["id"] for t in row["tokens"]] == [*step1.observation_ids, *step1.action_ids]
    expected_mask = ([0] * len(step0.observation_ids) + [1] * len(step0.action_ids)
                     + [0] * (len(step1.observation_ids) - len(step0.observation_ids) - len(step0.action_ids))
                     + [1] * len(step1.action_ids))
    assert [t["mask"] for t in row["tokens"]] == expected_mask
    per_step = get(viewer_url, f"/api/sessions/{recorded.tool_session}/rows", layout="per_step")
    assert len(per_step["rows"]) == 2


def test_drift_and_group(recorded, viewer_url):
    drift = get(viewer_url, f"/api/sessions/{recorded.drift_session}")
    assert [s["drift"] for s in drift["steps"]] == [False, True]
    assert len(get(viewer_url, f"/api/sessions/{recorded.drift_session}/rows")["rows"]) == 2  # drift starts a row
    group = get(viewer_url, f"/api/groups/{GROUP_ID}", run=RUN_ID)
    assert group["advantages"] is True and group["estimator"] == "grpo" and "rloo" in group["estimators"]
    assert [s["session"]["reward"] for s in group["samples"]] == list(GROUP_REWARDS)
    assert [s["advantage"] for s in group["samples"]] == pytest.approx([-1.0, 0.0, 1.0], abs=1e-4)
    rloo = get(viewer_url, f"/api/groups/{GROUP_ID}", run=RUN_ID, estimator="rloo")
    assert [s["advantage"] for s in rloo["samples"]] == pytest.approx([-0.75, 0.0, 0.75], abs=1e-4)
    assert httpx.get(viewer_url + "/api/groups/none-such").status_code == 404


def test_prometheus_train_metrics(recorded, viewer_url):
    text = httpx.get(viewer_url + "/metrics").text
    assert "# TYPE agentr1_train_reward_mean gauge" in text
    assert f'agentr1_train_reward_mean{{run="{RUN_ID}",out_dir="calculator"}} 0.6' in text
    assert f'agentr1_train_step{{run="{RUN_ID}",out_dir="calculator"}} 6.0' in text
    assert 'agentr1_train_reward_mean{run="other-job",out_dir="other-job"} 0.75' in text
