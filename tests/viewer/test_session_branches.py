"""A forked session in the viewer: the branch tree the gateway reports (which step each branch forks from, its
own steps), each step's branch, the trainer's rows per branch, and in headless Chromium the tree, selecting a
branch (its path of steps and its rows only) and the selection kept in the URL."""

from __future__ import annotations

import httpx
import pytest
from viewer_harness import open_page, screenshot


def _api(url: str, path: str, **params: object) -> dict:
    response = httpx.get(url + path, params=params, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_api_reports_the_gateways_branches(recorded, viewer_url):
    sid = recorded.branch_session
    gateway = _api(recorded.gateway_url, f"/sessions/{sid}")
    detail = _api(viewer_url, f"/api/sessions/{sid}")
    assert [{k: b[k] for k in ("id", "kind", "parent_step", "steps")} for b in detail["branches"]] == \
        gateway["branches"] == [{"id": 0, "kind": "root", "parent_step": None, "steps": [0, 1, 3]},
                                {"id": 1, "kind": "fork", "parent_step": 0, "steps": [2]}]
    main, fork = detail["branches"]
    assert (main["path"], main["children"], main["parent_branch"]) == ([0, 1, 3], [1], None)
    assert (fork["path"], fork["children"], fork["parent_branch"]) == ([0, 2], [], 0)
    assert detail["superseded_steps"] == []
    steps = {s["index"]: s for s in detail["steps"]}
    assert {i: s["branch"] for i, s in steps.items()} == {0: 0, 1: 0, 2: 1, 3: 0}
    assert {i: s["children"] for i, s in steps.items()} == {0: [1, 2], 1: [3], 2: [], 3: []}
    # each step is compared with the step it continues: the fork with step 0, turn 3 with step 1
    assert {i: (s["compared_to"], s["extends_previous"]) for i, s in steps.items()} == \
        {0: (None, None), 1: (0, True), 2: (0, True), 3: (1, True)}
    rows = _api(viewer_url, f"/api/sessions/{sid}/rows")
    assert rows["source"] == "trainer" and [r["steps"] for r in rows["rows"]] == [[0, 1, 3], [2]]


@pytest.mark.browser
def test_the_session_page_shows_the_branch_tree_and_selects_a_branch(recorded, viewer_url, page):
    sid = recorded.branch_session
    stored = {s.index: s for s in recorded.store.get_session(sid).steps}
    open_page(page, f"{viewer_url}/sessions/{sid}")
    assert page.inner_text("#n-branches") == "2"
    tree = page.eval_on_selector_all("#branches li.branch", "els => els.map(e => ({id: e.dataset.branch, "
                                     "parent: e.dataset.parentStep, steps: e.dataset.steps, "
                                     "under: e.parentElement.closest('li.branch')?.dataset.branch ?? null}))")
    assert tree == [{"id": "0", "parent": "", "steps": "0,1,3", "under": None},
                    {"id": "1", "parent": "0", "steps": "2", "under": "0"}]  # the fork is nested under branch 0
    assert "forks from step 0" in page.inner_text('#branches li.branch[data-branch="1"]')
    badges = page.eval_on_selector_all("section.step", "els => els.map(e => e.querySelector('.badge.branch').textContent)")
    assert badges == ["branch 0", "branch 0", "branch 1", "branch 0"]
    assert "extends step 0" in page.inner_text("#step-2 .kv")
    assert "continued by steps 1, 2" in page.inner_text("#step-0 .forked")

    def visible(selector: str, attribute: str) -> list[str]:
        return page.eval_on_selector_all(selector, f"els => els.filter(e => !e.hidden).map(e => e.dataset.{attribute})")

    page.wait_for_selector("#rows .row")
    page.click('#branches li.branch[data-branch="1"] > button.branch-select')
    assert page.url.endswith(f"/sessions/{sid}?branch=1")
    assert visible("section.step", "step") == ["0", "2"]  # the shared step 0, then the fork's own step
    assert page.eval_on_selector("#step-0", "e => e.classList.contains('shared')")
    assert visible("#rows .row", "steps") == ["2"]
    tokens = page.eval_on_selector_all("#rows .row:not([hidden]) .tok",
                                       "s => s.map(e => [Number(e.dataset.id), Number(e.dataset.mask)])")
    fork = stored[2]
    assert tokens == [[i, 0] for i in fork.observation_ids] + [[i, 1] for i in fork.action_ids]
    assert "steps 0 → 2 (steps 0 shared with branch 0)" in page.inner_text("#branch-note")
    screenshot(page, "session-branches")

    page.click('#branches li.branch[data-branch="0"] > button.branch-select')
    assert visible("section.step", "step") == ["0", "1", "3"]
    assert visible("#rows .row", "steps") == ["0,1,3"]
    page.select_option("#layout", "per_step")  # the rows of the chosen branch in the other layout too
    page.wait_for_function("document.querySelectorAll('#rows .row').length === 4")
    assert visible("#rows .row", "steps") == ["0", "1", "3"]
    page.click("#branch-all")
    assert visible("section.step", "step") == ["0", "1", "2", "3"] and not page.url.endswith("branch=0")

    open_page(page, f"{viewer_url}/sessions/{sid}?branch=1")  # a shared link opens on its branch
    page.wait_for_selector("#rows .row", state="attached")
    assert visible("section.step", "step") == ["0", "2"]
    assert page.eval_on_selector('#branches li.branch[data-branch="1"]', "e => e.classList.contains('active')")


def test_a_session_that_never_forked_has_no_tree(recorded, viewer_url):
    detail = _api(viewer_url, f"/api/sessions/{recorded.tool_session}")
    assert [(b["kind"], b["steps"]) for b in detail["branches"]] == [("root", [0, 1])]
    assert [s["branch"] for s in detail["steps"]] == [0, 0]


def test_the_viewers_rows_are_the_trainers(recorded):
    from agentr1.trainer import BatchConfig, build_rows
    from agentr1.viewer.tokens import Tokenizers, session_rows

    record = recorded.store.get_session(recorded.branch_session)
    for layout in ("merged", "per_step"):
        trainer = [(r.prompt_ids, r.response_ids, r.response_mask, [s.step_index for s in r.segments])
                   for r in build_rows([record], BatchConfig(layout=layout)).rows]
        shown = [([t.id for t in r.tokens[:r.prompt_len]], [t.id for t in r.tokens[r.prompt_len:]],
                  [t.mask for t in r.tokens[r.prompt_len:]], r.steps)
                 for r in session_rows(record, layout, Tokenizers()).rows]
        assert shown == trainer
    assert [steps for *_, steps in trainer] == [[0], [1], [2], [3]]
