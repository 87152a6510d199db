"""The commands in a pseudo-terminal (pexpect): `agentr1 chat` (type a message, see the reply, find
the step stored) and `agentr1 view` (serves the store)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import httpx
import pexpect
from viewer_harness import RUN_ID, wait_until

from agentr1.gateway.server import free_port

AGENTR1 = str(Path(sys.executable).with_name("agentr1"))
SESSION = re.compile(rb"session ([0-9a-f]{32})")


def spawn(recorded, *args: str) -> pexpect.spawn:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    child = pexpect.spawn(AGENTR1, ["chat", "--gateway", recorded.gateway_url, *args], env=env, timeout=60)
    child.expect(SESSION)
    return child


def test_chat_cli_records_each_turn(recorded):
    child = spawn(recorded, "--tools", "calculator", "--run", "cli-chat")
    first = child.match.group(1).decode()
    child.expect_exact("you> ")
    child.sendline("What is 6*7? Use the calculator.")
    child.expect_exact("[tool call] calculator(")
    child.expect_exact("[tool result] 42")
    child.expect_exact("The answer is 42.")
    child.expect_exact("2 steps recorded in session " + first)
    child.expect_exact("you> ")
    child.sendline("/reset")
    child.expect(SESSION)
    second = child.match.group(1).decode()
    child.expect_exact("you> ")
    child.sendline("hello there")
    child.expect_exact("echo: hello there")
    child.expect_exact("you> ")
    child.sendline("/quit")
    child.expect_exact(f"session {second} finished")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    one, two = recorded.store.get_session(first), recorded.store.get_session(second)
    assert (one.run_id, one.status, len(one.steps)) == ("cli-chat", "finished", 2)
    assert one.steps[0].action["tool_calls"][0]["function"]["name"] == "calculator"
    assert one.steps[0].feedback_messages[0]["content"] == "42"
    assert one.steps[1].action["content"] == "The answer is 42."
    assert [s.action["content"] for s in two.steps] == ["echo: hello there"]
    assert two.steps[0].messages_sent == [{"role": "user", "content": "hello there"}]


def test_chat_cli_reports_an_unreachable_gateway():
    child = pexpect.spawn(AGENTR1, ["chat", "--gateway", "http://127.0.0.1:9"], timeout=60)
    child.expect_exact("cannot reach the gateway")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2


def test_view_cli_serves_the_store(recorded):
    port = free_port()
    child = pexpect.spawn(AGENTR1, ["view", "--db", recorded.db, "--runs-dir", str(recorded.runs_dir),
                                    "--port", str(port)], env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=60)
    try:
        child.expect_exact(f"agentr1 viewer on http://127.0.0.1:{port}")
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(url + "/api/health").status_code == 200
            except httpx.TransportError:
                return False

        assert wait_until(healthy, 30)
        assert RUN_ID in [r["id"] for r in httpx.get(url + "/api/runs").json()["items"]]
        assert "<script" in httpx.get(f"{url}/runs/{RUN_ID}").text
        detail = httpx.get(f"{url}/api/sessions/{recorded.tool_session}").json()
        # no --tokenizer: the viewer decodes with the directory the steps record as the model that served them
        assert detail["tokenizer"] == str(recorded.tokenizer_path)
        tokens = detail["steps"][0]["action_tokens"]
        assert [t["id"] for t in tokens] == recorded.store.get_session(recorded.tool_session).steps[0].action_ids
        assert [t["text"] for t in tokens] == [recorded.tokenizer.decode([t["id"]]) for t in tokens]
        assert "agentr1_train_reward_mean" in httpx.get(url + "/metrics").text
    finally:
        child.terminate(force=True)


def test_view_cli_refuses_a_missing_store(tmp_path):
    child = pexpect.spawn(AGENTR1, ["view", "--db", f"sqlite:///{tmp_path}/none/x.db"], timeout=60)
    child.expect_exact("error:")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
