"""The HotpotQA recipe's parts: tasks, BM25 search over the shipped paragraphs, EM/F1, the agent's tool handling."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from examples.hotpotqa.agent import _tool_output
from examples.hotpotqa.data import SPLIT_ROWS, load_corpus, load_rows, make_tasks
from examples.hotpotqa.rewards import (
    exact_match,
    exact_match_reward,
    f1_reward,
    f1_score,
    final_answer,
    normalize_answer,
)
from examples.hotpotqa.search import ParagraphIndex, default_index, search
from split_checks import assert_splits_disjoint, config_splits, question_key


def test_corpus_pools_every_paragraph_once():
    corpus = load_corpus()
    assert len(corpus) == 2966 and len({p.title for p in corpus}) == 2966
    assert all(p.text and not p.text.startswith(" ") for p in corpus)


def test_val_and_test_are_held_out_and_stable_train_cycles_over_the_rest():
    val, test = make_tasks("val", 50, 1), make_tasks("test", 50, 1)
    train = make_tasks("train", 600, 0)
    assert [t["id"] for t in val + test] == [r["id"] for r in load_rows()[:100]]
    assert len({t["question"] for t in train}) == 200 and len({t["id"] for t in train}) == 600
    assert make_tasks("train", 8, 0) == train[:8] and make_tasks("train", 8, 1) != train[:8]
    assert make_tasks("test", 5, 0) == test[:5]  # the held-out sets do not depend on the seed
    with pytest.raises(ValueError, match="only 50 val questions"):
        make_tasks("val", 51, 0)
    with pytest.raises(ValueError, match="split must be"):
        make_tasks("dev", 3, 0)


def _gold_paragraphs(task: dict) -> list[tuple[str, ...]]:
    """A question's gold paragraphs: two rows asking about the same pair would be one question reworded."""
    return [tuple(task["supporting_titles"])]


@pytest.mark.parametrize("overrides", [[], ["data.val_size=50", "data.train_size=600"]])
def test_the_config_loads_train_val_and_test_questions_that_share_nothing(overrides):
    splits = config_splits("examples/hotpotqa/train.yaml", overrides)
    assert_splits_disjoint(splits, question_key, _gold_paragraphs)


def test_bm25_finds_the_gold_paragraphs_of_known_questions():
    index = default_index()
    first = make_tasks("val", 1, 0)[0]  # the Tinted Windows question: both gold paragraphs name the band
    titles = [p.title for p in index.search(first["question"], k=2)]
    assert set(titles) == set(first["supporting_titles"]) == {"Tinted Windows (album)", "Tinted Windows (band)"}
    # over the held-out questions, the top 5 hits hold at least one gold paragraph almost always
    hits = [bool(set(first_titles) & set(t["supporting_titles"]))
            for t in make_tasks("val", len(SPLIT_ROWS["val"]), 0)
            for first_titles in [[p.title for p in index.search(t["question"], k=5)]]]
    assert sum(hits) / len(hits) >= 0.9


def test_search_tool_text_and_bad_queries():
    text = search("Otto Robert Frisch atomic bomb detonation mechanism", k=1)
    assert text.startswith("[Otto Robert Frisch] Otto Robert Frisch FRS") and "\n\n" not in text
    assert search("the of and").startswith("no paragraph matches")  # stopwords only
    assert search("").startswith("error:") and search(None).startswith("error:")
    with pytest.raises(ValueError, match="empty corpus"):
        ParagraphIndex([])


def _call(name: str, arguments: str) -> SimpleNamespace:
    return SimpleNamespace(function=SimpleNamespace(name=name, arguments=arguments))


def test_agent_reports_bad_tool_calls_to_the_model():
    assert _tool_output(_call("search", '{"query": "Lise Meitner"}')).startswith("[Lise Meitner]")
    assert "unknown tool 'lookup'" in _tool_output(_call("lookup", "{}"))
    assert "not valid JSON" in _tool_output(_call("search", "{query"))
    assert "JSON object" in _tool_output(_call("search", "[1]"))
    assert _tool_output(_call("search", "{}")).startswith("error: the search tool needs")


@pytest.mark.parametrize(("prediction", "gold", "em", "f1"), [
    ("Tulsa", "Tulsa", 1.0, 1.0),
    ("The Tulsa.", "tulsa", 1.0, 1.0),  # articles, case and punctuation are normalised away
    ("Tulsa, Oklahoma", "Tulsa", 0.0, 2 / 3),  # precision 1/2, recall 1
    ("New York City", "the city of New York", 0.0, 2 * 1 * (3 / 4) / (1 + 3 / 4)),  # 3 of 4 gold words
    ("yes", "no", 0.0, 0.0),
    ("no it is", "no", 0.0, 0.0),  # a yes/no gold scores only an exact yes/no
    ("", "Tulsa", 0.0, 0.0),
])
def test_exact_match_and_f1(prediction, gold, em, f1):
    assert exact_match(prediction, gold) == em
    assert f1_score(prediction, gold) == pytest.approx(f1)


def test_final_answer_and_session_rewards():
    assert final_answer("I searched.\nAnswer: Tulsa\nThanks") == "Tulsa"
    assert final_answer("answer: first. Answer:  Tulsa ") == "Tulsa"
    assert final_answer("Tulsa") == "Tulsa" and final_answer(None) == ""
    assert normalize_answer("  An  Apple,  the pie ") == "apple pie"

    def session(*contents):
        return SimpleNamespace(steps=[SimpleNamespace(action={"content": c}) for c in contents])

    task = {"answer": "Tulsa"}
    assert exact_match_reward(session(None, "Answer: Tulsa"), task) == 1.0
    assert f1_reward(session("Answer: Tulsa, Oklahoma"), task) == pytest.approx(2 / 3)
    assert exact_match_reward(session(), task) == 0.0 and f1_reward(session("Answer: Tulsa", None), task) == 0.0
