"""``agentr1 gateway --backend sglang --launch``: the launcher starts server processes, waits for their
health, restarts crashed ones, gives up with the log tail, and leaves no process behind.

SGLang cannot run on this CPU-only machine, so the launched command is tests/backends/fake_sglang.py
(SGLang's HTTP protocol and CLI flag names, answered by the real local engine on the tiny model) —
the launcher's ``command`` option, as ``--launch-command`` sets it. Failure modes that need a server
to crash on cue use a few lines of plain Python in its place."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from agentr1.gateway.backends.launcher import LaunchError, LaunchSpec, SGLangLauncher, parse_command

FAKE = [sys.executable, str(Path(__file__).with_name("fake_sglang.py"))]
CRASHES_AFTER_HEALTHY = (
    "import os, sys, threading, http.server\n"
    "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self): self.send_response(200); self.end_headers()\n"
    "    def log_message(self, *a): pass\n"
    "srv = http.server.HTTPServer(('127.0.0.1', port), H)\n"
    "threading.Timer(0.4, lambda: (print('simulated crash', flush=True), os._exit(7))).start()\n"
    "srv.serve_forever()\n"
)


def free_ports(n: int) -> int:
    """A base port with ``n`` consecutive free ports."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n < 65535 and all(_free(base + i) for i in range(n)):
            return base
    raise RuntimeError("no free port range")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)  # the server's process group (its id is the leader's pid)
    except ProcessLookupError:
        return True
    return False


def wait_for(condition, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# -- without a model: fast -----------------------------------------------------------------------


def test_a_server_that_exits_during_startup_fails_the_launch_with_its_log(tmp_path):
    spec = LaunchSpec(model_path="/models/m", base_port=free_ports(1), log_dir=str(tmp_path),
                      command=[sys.executable, "-c", "import sys; print('RuntimeError: no CUDA GPUs are available');"
                               " sys.exit(3)"])
    launcher = SGLangLauncher(spec, poll_interval_s=0.05)
    with pytest.raises(LaunchError, match=r"(?s)exited with code 3 before it was healthy.*no CUDA GPUs are available"):
        launcher.start()
    assert all(gone(pid) for pid in launcher.pids)
    # the command line SGLang gets, with its own flag names
    assert "--model-path /models/m --host 127.0.0.1 --port" in (tmp_path / "sglang-0.log").read_text()


def test_a_server_never_healthy_times_out_and_is_stopped(tmp_path):
    spec = LaunchSpec(model_path="m", base_port=free_ports(1), log_dir=str(tmp_path), startup_timeout_s=1.0,
                      stop_timeout_s=2.0, command=[sys.executable, "-c", "print('loading', flush=True); "
                                                   "import time; time.sleep(60)"])
    launcher = SGLangLauncher(spec, poll_interval_s=0.05)
    with pytest.raises(LaunchError, match=r"(?s)not healthy after 1 s.*loading"):
        launcher.start()
    assert launcher.pids and all(gone(pid) for pid in launcher.pids)


def test_supervision_gives_up_after_max_restarts_and_reports_the_log(tmp_path):
    errors: list[LaunchError] = []
    spec = LaunchSpec(model_path="m", base_port=free_ports(1), log_dir=str(tmp_path), max_restarts=2, backoff_s=0.05,
                      command=[sys.executable, "-c", CRASHES_AFTER_HEALTHY])
    launcher = SGLangLauncher(spec, on_give_up=errors.append, poll_interval_s=0.05)
    launcher.start()
    try:
        wait_for(lambda: launcher.error is not None, 20, "the launcher to give up")
    finally:
        launcher.stop()
    assert errors == [launcher.error] and launcher.servers[0].restarts == 2
    assert "exited with code 7 after 2 restarts; giving up" in str(launcher.error)
    assert "simulated crash" in str(launcher.error)
    assert (tmp_path / "sglang-0.log").read_text().count("agentr1: starting") == 3


def test_launch_spec_errors_are_clear():
    with pytest.raises(ValueError, match="--launch-servers must be >= 1"):
        LaunchSpec(model_path="m", servers=0).validate()
    with pytest.raises(ValueError, match="--tp needs a number"):
        LaunchSpec(model_path="m", extra_args=["--tp", "two"]).validate()
    assert LaunchSpec(model_path="m", extra_args=["--tp-size=4"]).gpus() == 4
    assert parse_command(None)[1:] == ("-m", "sglang.launch_server")
    assert parse_command("python 'my server.py'") == ("python", "my server.py")


def test_cli_refuses_launch_without_the_sglang_backend():
    from typer.testing import CliRunner

    from agentr1.cli.main import app

    result = CliRunner().invoke(app, ["gateway", "--backend", "vllm", "--launch"])
    assert result.exit_code == 2 and "--launch starts SGLang servers" in result.output


# -- launched fake SGLang servers on the tiny model: slow ----------------------------------------


@pytest.fixture(scope="module")
def launched(tiny_model_path, tmp_path_factory):
    spec = LaunchSpec(model_path=str(tiny_model_path), servers=2, base_port=free_ports(2), command=FAKE,
                      extra_args=["--served-model-name", "policy"], backoff_s=0.1, startup_timeout_s=120,
                      log_dir=str(tmp_path_factory.mktemp("sglang-logs")))
    launcher = SGLangLauncher(spec, poll_interval_s=0.1)
    launcher.start()
    yield launcher
    launcher.stop()


@pytest.mark.slow
def test_launched_servers_are_healthy_and_serve_gateway_requests(launched, tiny_model_path, tmp_path):
    from agentr1.gateway.app import create_app
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import GatewaySettings
    from agentr1.store import TraceStore

    assert [httpx.get(u + "/health").status_code for u in launched.urls] == [200, 200]
    assert "(base GPU 1)" in (launched.log_dir / "sglang-1.log").read_text()  # server i starts at GPU i * tp
    settings = GatewaySettings(db=str(tmp_path / "gw.db"), backend="sglang", backend_urls=launched.urls,
                               model=str(tiny_model_path))
    with BackgroundServer(create_app(settings)) as gateway:
        client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="x")
        answer = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=4, temperature=0)
    assert answer.usage.completion_tokens == 4
    store = TraceStore.open(str(tmp_path / "gw.db"))
    try:
        [session] = store.list_sessions()
        [step] = store.get_session(session.id).steps
        assert step.backend == "sglang" and len(step.action_ids) == 4
    finally:
        store.close()


@pytest.mark.slow
def test_a_crashed_server_is_restarted(launched):
    server = launched.servers[0]
    old_pid = server.process.pid
    os.killpg(old_pid, signal.SIGKILL)
    wait_for(lambda: server.restarts == 1 and server.process.pid != old_pid, 30, "the restart")
    wait_for(lambda: _health(server.url) == 200, 120, "the restarted server's health")
    assert gone(old_pid) and launched.error is None


def _health(url: str) -> int:
    try:
        return httpx.get(url + "/health").status_code
    except httpx.HTTPError:
        return 0


@pytest.mark.slow
def test_cli_gateway_with_launch_serves_and_leaves_no_process_on_exit(tiny_model_path, tmp_path):
    """`agentr1 gateway --backend sglang --launch ...` as a user runs it; SIGTERM ends it and its servers."""
    gateway_port, server_port = free_ports(1), free_ports(1)
    env = {**os.environ, "AGENTR1_SGLANG_LAUNCH_COMMAND": " ".join(FAKE)}
    argv = [sys.executable, "-m", "agentr1.cli.main", "gateway", "--backend", "sglang", "--launch",
            "--model", str(tiny_model_path), "--launch-port", str(server_port), "--port", str(gateway_port),
            "--db", str(tmp_path / "cli.db"), "--accept-any-model", "--launch-args", "--served-model-name policy"]
    gateway = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: gateway.poll() is not None or _health(f"http://127.0.0.1:{gateway_port}") == 200, 120,
                 "the gateway")
        assert gateway.poll() is None, gateway.stdout.read().decode() if gateway.stdout else ""
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="x")
        answer = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=3, temperature=0)
        assert answer.usage.completion_tokens == 3
        server_pids = _listening_pids(server_port)
        assert server_pids, "no launched server listens on its port"
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=60) == 0
    finally:
        if gateway.poll() is None:
            gateway.kill()
    assert all(gone(pid) for pid in server_pids)
    assert _health(f"http://127.0.0.1:{server_port}") == 0


def _listening_pids(port: int) -> list[int]:
    """Pids of processes with a socket listening on ``port`` (from /proc, Linux)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(fields[9])
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        except OSError:
            continue
        if any(f"socket:[{inode}]" in links for inode in inodes):
            pids.append(int(proc.name))
    return pids
