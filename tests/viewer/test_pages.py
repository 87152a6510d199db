"""The viewer's pages in headless Chromium: what a person sees matches the store."""

from __future__ import annotations

import pytest
from viewer_harness import GROUP_ID, GROUP_REWARDS, RUN_ID, open_page, screenshot, wait_until

pytestmark = pytest.mark.browser


def session_rows(page) -> list[dict]:
    return page.eval_on_selector_all("#session-table tbody tr[data-session]",
                                     "rows => rows.map(r => ({id: r.dataset.session, status: r.dataset.status, "
                                     "reward: r.dataset.reward}))")


def apply_filters(page, expected_query: str, **fields: str) -> None:
    form = "#session-filters"
    for name, value in fields.items():
        selector = f"{form} [name={name}]"
        if page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
            page.select_option(selector, value)
        else:
            page.fill(selector, value)
    page.click(f"{form} button[type=submit]")
    page.wait_for_selector(f'#sessions[data-query="{expected_query}"]')


def test_runs_page(recorded, viewer_url, page):
    open_page(page, viewer_url + "/")
    row = page.wait_for_selector(f'#runs tr[data-run="{RUN_ID}"]')
    cells = [c.inner_text() for c in row.query_selector_all("td")]
    assert cells[2:4] == ["6", "8"]  # sessions, steps
    screenshot(page, "runs")
    row.query_selector("a").click()
    page.wait_for_selector("#curves")
    assert page.url.endswith(f"/runs/{RUN_ID}")


def test_run_page_curves_versions_and_filters(recorded, viewer_url, page):
    open_page(page, f"{viewer_url}/runs/{RUN_ID}")
    for metric in ("reward/mean", "actor/pg_loss", "actor/kl", "success/val"):
        chart = page.wait_for_selector(f'#curves .chart[data-metric="{metric}"]')
        assert chart.get_attribute("data-points") == "6"
        assert chart.query_selector("svg path") is not None
    versions = [r.inner_text().split("\t") for r in page.query_selector_all("#versions tbody tr")]
    assert [v[0] for v in versions] == ["v0", "v1"]
    assert len(session_rows(page)) == 6
    screenshot(page, "run")

    apply_filters(page, "?status=failed&sort=created&order=desc", status="failed")
    assert [r["id"] for r in session_rows(page)] == [recorded.failed_session]

    apply_filters(page, "?min_reward=0.5&sort=reward&order=desc", status="", min_reward="0.5", sort="reward")
    assert [float(r["reward"]) for r in session_rows(page)] == [1.0, 1.0, 0.5]

    apply_filters(page, "?min_reward=0.1&max_reward=0.6&sort=reward&order=asc", min_reward="0.1", max_reward="0.6",
                  order="asc")
    assert [float(r["reward"]) for r in session_rows(page)] == [0.25, 0.5]
    screenshot(page, "sessions-filtered", element="#sessions")

    page.click(f'#groups a:text("{GROUP_ID}")')
    page.wait_for_selector("#samples .sample")


def test_session_page_tokens_and_mask(recorded, viewer_url, page):
    stored = recorded.store.get_session(recorded.tool_session)
    open_page(page, f"{viewer_url}/sessions/{recorded.tool_session}")
    for step in stored.steps:
        spans = f'.action-tokens[data-step="{step.index}"] .tok'
        ids = page.eval_on_selector_all(spans, "s => s.map(e => Number(e.dataset.id))")
        texts = page.eval_on_selector_all(spans, "s => s.map(e => e.textContent)")
        assert ids == step.action_ids
        assert texts == [recorded.tokenizer.decode([i]) for i in step.action_ids]
        colours = page.eval_on_selector_all(spans, "s => s.map(e => e.style.background)")
        assert all(colours) and len(set(colours)) > 1  # coloured by logprob
    step0 = page.query_selector("#step-0")
    assert "calculator" in step0.query_selector(".action .toolcall").inner_text()
    assert "84" in step0.query_selector(".feedback").inner_text()
    assert page.query_selector("#step-1 .action").inner_text().strip().endswith("The answer is 84.")
    assert page.query_selector("#step-0 .step-reward").inner_text() == "0.200"

    page.wait_for_selector("#rows .row")
    rows = page.query_selector_all("#rows .row")
    assert len(rows) == 1 and rows[0].get_attribute("data-steps") == "0,1"
    tokens = page.eval_on_selector_all("#rows .row .tok",
                                       "s => s.map(e => [Number(e.dataset.id), Number(e.dataset.mask)])")
    s0, s1 = stored.steps
    feedback = len(s1.observation_ids) - len(s0.observation_ids) - len(s0.action_ids)
    assert [t[0] for t in tokens] == [*s1.observation_ids, *s1.action_ids]
    assert [t[1] for t in tokens] == ([0] * len(s0.observation_ids) + [1] * len(s0.action_ids) + [0] * feedback
                                      + [1] * len(s1.action_ids))
    screenshot(page, "session")

    page.select_option("#layout", "per_step")
    page.wait_for_function("document.querySelectorAll('#rows .row').length === 2")


def test_drift_is_flagged(recorded, viewer_url, page):
    open_page(page, f"{viewer_url}/sessions/{recorded.drift_session}")
    assert page.query_selector("#step-0 .badge.drift") is None
    assert "history rewritten" in page.query_selector("#step-1 .badge.drift").inner_text()
    page.wait_for_function("document.querySelectorAll('#rows .row').length === 2")


def test_context_policy_difference_is_highlighted(recorded, viewer_url, page):
    open_page(page, f"{viewer_url}/sessions/{recorded.window_session}")
    assert "context policy changed" in page.query_selector("#step-0 .badge.differs").inner_text()
    seen = page.query_selector_all("#step-0 .seen .msg")
    assert [m.get_attribute("class").split() for m in seen] == [["msg", "system"], ["msg", "user", "diff"],
                                                                 ["msg", "user"]]
    assert "2 sent message(s) left out" in page.query_selector("#step-0 .seen .dropped").inner_text()
    assert len(page.query_selector_all("#step-0 .sent .msg")) == 4
    screenshot(page, "session-context-policy", element="#step-0")


def test_group_page_advantages(recorded, viewer_url, page):
    open_page(page, f"{viewer_url}/groups/{GROUP_ID}?run={RUN_ID}")
    cards = page.query_selector_all("#samples .sample")
    assert [c.get_attribute("data-session") for c in cards] == recorded.group_sessions
    assert [float(c.get_attribute("data-reward")) for c in cards] == list(GROUP_REWARDS)
    advantages = [float(c.get_attribute("data-advantage")) for c in cards]
    assert advantages == pytest.approx([-1.0, 0.0, 1.0], abs=1e-4)  # GRPO: (r - mean) / std within the group
    assert cards[2].query_selector(".adv").inner_text().startswith("+1.0")
    screenshot(page, "group")

    page.select_option("#estimator", "rloo")
    page.wait_for_url("**estimator=rloo**")
    wait_until(lambda: page.query_selector("#samples .sample") and
               page.query_selector("#samples .sample").get_attribute("data-advantage") == "-0.75")
    advantages = [float(c.get_attribute("data-advantage")) for c in page.query_selector_all("#samples .sample")]
    assert advantages == pytest.approx([-0.75, 0.0, 0.75], abs=1e-4)  # RLOO: r - mean of the others


def test_chat_page_records_steps(recorded, viewer_url, page):
    open_page(page, viewer_url + "/chat")
    page.check("input[name=tool][value=calculator]")
    page.fill("#chat-input", "What is 6*7? Use the calculator.")
    page.click("#chat-send")
    page.wait_for_selector("#transcript .msg.assistant:has-text('The answer is 42.')")
    assert "calculator" in page.query_selector("#transcript .msg.assistant .toolcall").inner_text()
    assert "42" in page.query_selector("#transcript .msg.tool").inner_text()
    link = page.wait_for_selector("#chat-session-link")
    session_id = link.inner_text()
    assert link.get_attribute("href") == f"/sessions/{session_id}"
    recorded_session = recorded.store.get_session(session_id)
    assert recorded_session.run_id == "chat" and len(recorded_session.steps) == 2
    assert recorded_session.steps[1].action["content"] == "The answer is 42."
    screenshot(page, "chat")

    page.click("#transcript a.step-link >> nth=-1")
    page.wait_for_selector("#step-1")
    assert page.url.endswith(f"/sessions/{session_id}#step-1")
