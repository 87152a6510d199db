"""A session's sampling override (metadata "sampling"): the gateway decodes every call of the session as the
session says, whatever the agent asks; on the embedded engine with a tiny random model, the real OpenAI client."""

from __future__ import annotations

import httpx
import openai
from gateway_harness import serve

PROMPT = [{"role": "user", "content": "count to ten"}]


def _session(url: str, **body) -> dict:
    answer = httpx.post(f"{url}/sessions", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _reply(session: dict, **sampling) -> list[int]:
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["api_key"])
    client.chat.completions.create(model="m", messages=PROMPT, max_tokens=16, **sampling)
    return session["id"]


def test_greedy_override_makes_sampling_agents_deterministic(tmp_path, tiny_model_path):
    with serve(tmp_path / "g.db", model=str(tiny_model_path), accept_any_model=True) as (url, store):
        greedy = [_reply(_session(url, metadata={"sampling": {"temperature": 0}}), temperature=1.0) for _ in range(3)]
        free = [_reply(_session(url), temperature=1.0) for _ in range(3)]
        greedy_steps = [store.get_session(s).steps[0] for s in greedy]
        free_steps = [store.get_session(s).steps[0] for s in free]
        assert len({tuple(step.action_ids) for step in greedy_steps}) == 1  # temperature 0 on every call
        assert len({tuple(step.action_ids) for step in free_steps}) > 1  # the agent's own temperature 1
        assert all(step.sampling["temperature"] == 0 for step in greedy_steps)  # what the model got
        assert store.get_session(greedy[0]).metadata["sampling"] == {"temperature": 0.0, "seed_offset": 0}


def test_seed_offset_separates_seeded_samples_and_keeps_each_reproducible(tmp_path, tiny_model_path):
    with serve(tmp_path / "s.db", model=str(tiny_model_path), accept_any_model=True) as (url, store):
        def sample(offset: int) -> tuple[int, ...]:
            sid = _reply(_session(url, metadata={"sampling": {"seed_offset": offset}}), temperature=1.0, seed=5)
            return tuple(store.get_session(sid).steps[0].action_ids)

        first, again, other = sample(0), sample(0), sample(1_000_003)
        assert first == again
        assert first != other


def test_bad_overrides_are_400s_naming_the_field_and_create_nothing(tmp_path, tiny_model_path):
    with serve(tmp_path / "b.db", model=str(tiny_model_path), accept_any_model=True) as (url, store):
        for bad in ({"temperature": -1}, {"temperature": "hot"}, {"top_p": 0}, {"sedd_offset": 1}, [1]):
            answer = httpx.post(f"{url}/sessions", json={"metadata": {"sampling": bad}})
            assert answer.status_code == 400, (bad, answer.text)
            assert answer.json()["error"]["param"] == "metadata.sampling"
        answer = httpx.post(f"{url}/sessions", json=[{}, {"metadata": {"sampling": {"temperature": -2}}}])
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "[1].metadata.sampling"
        assert store.list_sessions() == []
