"""Property-based fuzzing of the gateway's HTTP API from its own OpenAPI schema (schemathesis).

Every operation (admin routes aside: pausing the backend would turn later calls into 503s), the Responses
and Anthropic Messages routes included, gets generated requests, valid and not; each must be answered
within a timeout, never with a 5xx, and every error in OpenAI's shape (Anthropic's on /v1/messages). The number of examples per operation comes from
AGENTR1_FUZZ_EXAMPLES per operation and mode (default 8: a quick pass, ~130 requests, in the default suite); the long run is

    AGENTR1_FUZZ_EXAMPLES=300 pytest -m fuzz tests/gateway/test_fuzz.py
"""

from __future__ import annotations

import itertools
import os
import re

import httpx
import pytest
import schemathesis
from gateway_harness import serve_instant
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

EXAMPLES = int(os.environ.get("AGENTR1_FUZZ_EXAMPLES", "8"))
CALL_TIMEOUT_S = 15.0
ERROR_KEYS = {"message", "type", "param", "code"}
ANTHROPIC_PATH = re.compile(r"/v1/messages(/count_tokens)?$")


@pytest.fixture(scope="module")
def gateway_url(smollm2_path, tmp_path_factory):
    with serve_instant(tmp_path_factory.mktemp("fuzz") / "fuzz.db", smollm2_path) as (url, _store):
        yield url


@pytest.fixture(scope="module")
def api_schema(gateway_url):
    return schemathesis.openapi.from_url(f"{gateway_url}/openapi.json").exclude(path_regex="^/admin")


def _check(case, gateway_url):
    response = case.call(base_url=gateway_url, timeout=CALL_TIMEOUT_S)
    where = f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    assert response.status_code < 500 or (response.status_code == 503 and "Retry-After" in response.headers), where
    if response.status_code >= 400 and ANTHROPIC_PATH.search(case.formatted_path):  # Anthropic's own shape
        body = response.json()
        assert isinstance(body, dict) and body.get("type") == "error" and set(body["error"]) == {"type", "message"}, \
            where
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], where
    elif response.status_code >= 400:
        body = response.json()
        assert isinstance(body, dict) and set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, where
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], where
        assert isinstance(body["error"]["type"], str), where


@pytest.mark.fuzz
def test_api_never_fails_and_errors_are_openai_shaped(api_schema, gateway_url):
    # schemathesis' pytest plugin (from_fixture) does not run under pytest 9: drive hypothesis per operation
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10
    failures, calls = [], [0]
    for operation, mode in itertools.product(operations, GenerationMode):  # valid and invalid requests
        @given(case=operation.as_strategy(mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        def fuzz(case):
            calls[0] += 1
            _check(case, gateway_url)

        try:
            fuzz()
        except Unsatisfiable:  # nothing to make invalid (no parameters, or only a free-form string)
            assert mode is GenerationMode.NEGATIVE, operation.label
        except Exception as exc:  # every operation runs; all failures are reported together
            failures.append(f"{operation.label} ({mode.value}): {exc}")
    print(f"fuzz: {calls[0]} requests over {len(operations)} operations, {len(failures)} failing")
    assert not failures, "\n\n".join(failures)


SURROGATES = [  # found by probing beyond the schema's strings: each was a 500 (tokenizer TypeError) or, in metadata,
    # a stored session whose trace could not be read back (500 on GET /sessions/{id})
    ("/v1/chat/completions", '{"model":"p","messages":[{"role":"user","content":"\\ud800"}]}'),
    ("/v1/chat/completions", '{"model":"p","messages":[{"role":"user","content":[{"type":"text","text":"\\udc00"}]}]}'),
    ("/v1/chat/completions", '{"model":"p","messages":[{"role":"user","content":"x"}],'
                             '"tools":[{"type":"function","function":{"name":"\\ud800"}}]}'),
    ("/v1/chat/completions", '{"model":"p","messages":[{"role":"user","content":"x"}],"stop":["\\ud800"]}'),
    ("/v1/completions", '{"model":"p","prompt":"\\ud800"}'),
    ("/v1/completions", '{"model":"p","prompt":["a","\\udfff"]}'),
    ("/sessions", '{"metadata":{"k":"\\ud800"}}'),
    ("/v1/responses", '{"model":"p","input":"\\ud800"}'),
    ("/v1/responses", '{"model":"p","input":[{"role":"user","content":[{"type":"input_text","text":"\\udc00"}]}]}'),
]


@pytest.mark.parametrize(("path", "raw"), SURROGATES)
def test_lone_surrogate_escapes_are_a_400(gateway_url, path, raw):
    r = httpx.post(gateway_url + path, content=raw.encode(), headers={"content-type": "application/json"}, timeout=15)
    assert r.status_code == 400, r.text
    assert set(r.json()["error"]) == ERROR_KEYS and "Unicode" in r.json()["error"]["message"]


def test_lone_surrogate_escapes_are_a_400_in_anthropic_shape(gateway_url):
    raw = '{"model":"p","max_tokens":4,"messages":[{"role":"user","content":"\\ud800"}]}'
    r = httpx.post(f"{gateway_url}/v1/messages", content=raw.encode(), headers={"content-type": "application/json"},
                   timeout=15)
    assert r.status_code == 400 and r.json()["type"] == "error" and "Unicode" in r.json()["error"]["message"], r.text


def test_a_reward_for_a_step_beyond_any_sql_integer_is_a_400(gateway_url):
    s = httpx.post(f"{gateway_url}/sessions", json={}).json()
    r = httpx.post(f"{gateway_url}/sessions/{s['id']}/rewards", json={"value": 1, "step": 2**70})  # was a 500
    assert r.status_code == 400 and r.json()["error"]["param"].endswith("step"), r.text
    r = httpx.post(f"{gateway_url}/sessions/{s['id']}/rewards", json={"value": 1, "step": 2**31 - 1})
    assert r.status_code == 404 and r.json()["error"]["code"] == "step_not_found", r.text
