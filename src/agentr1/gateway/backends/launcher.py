"""``agentr1 gateway --backend sglang --launch``: the gateway starts, watches and stops its own SGLang
servers, so one command serves a model on a GPU node.

:class:`SGLangLauncher` runs ``servers`` processes of ``python -m sglang.launch_server --model-path
M --host H --port P --base-gpu-id G [extra args]`` (SGLang's own flag names; server ``i`` gets port
``base_port + i`` and GPUs from ``i * gpus_per_server``), each in its own process group with its
output in ``log_dir/sglang-<i>.log``, and:

- waits until every server answers ``GET /health`` with 200 (SGLang answers 200 once the model is
  loaded and warmed up); a server that exits first, or is not healthy within
  ``startup_timeout_s``, stops the launch with :class:`LaunchError` carrying its log's last lines;
- supervises them from a thread: a server that exits is started again after a back-off
  (``backoff_s``, doubling up to 60 s); after ``max_restarts`` restarts of one server the launcher
  gives up, records the error with the log tail and calls ``on_give_up`` (the CLI then stops the
  gateway with a non-zero exit);
- stops them all on :meth:`~SGLangLauncher.stop` (the gateway's exit): SIGTERM to each process
  group (SGLang's scheduler and detokenizer are child processes), SIGKILL after ``stop_timeout_s``.

Several servers are not put behind ``sglang_router``: the gateway's sglang backend takes their URLs
directly and already routes sessions sticky to one server (prefix-cache reuse), fails over, and
broadcasts weight updates to every server — a router would add a hop and hide the servers from the
weight sync.

``command`` replaces ``python -m sglang.launch_server`` (``--launch-command`` /
``AGENTR1_SGLANG_LAUNCH_COMMAND``): the tests launch tests/backends/fake_sglang.py this way, since
SGLang itself cannot run on a CPU-only machine.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agentr1.core import resolve_model
from agentr1.gateway.settings import GatewaySettings, LaunchSettings

__all__ = ["DEFAULT_COMMAND", "LaunchError", "LaunchSpec", "SGLangLauncher", "launch_servers", "parse_command"]

log = logging.getLogger(__name__)

DEFAULT_COMMAND = (sys.executable, "-m", "sglang.launch_server")
LOG_TAIL_LINES = 40
MAX_BACKOFF_S = 60.0


class LaunchError(RuntimeError):
    """A launched server failed to start, or kept crashing; the message carries its log's tail."""


@dataclass
class LaunchSpec:
    """What to launch. ``extra_args``: more ``sglang.launch_server`` flags (``--tp 2``,
    ``--mem-fraction-static 0.7``, ...), passed as they are."""

    model_path: str
    servers: int = LaunchSettings.model_fields["servers"].default
    host: str = "127.0.0.1"
    base_port: int = LaunchSettings.model_fields["port"].default
    gpus_per_server: int | None = None  # None: the --tp / --tp-size in extra_args, else 1
    extra_args: Sequence[str] = ()
    command: Sequence[str] = DEFAULT_COMMAND
    log_dir: str | None = None
    startup_timeout_s: float = LaunchSettings.model_fields["timeout_s"].default
    max_restarts: int = 3
    backoff_s: float = 2.0
    stop_timeout_s: float = 20.0
    env: dict[str, str] = field(default_factory=dict)

    def gpus(self) -> int:
        """GPUs per server: ``gpus_per_server``, else SGLang's tensor-parallel size in ``extra_args``."""
        if self.gpus_per_server is not None:
            return self.gpus_per_server
        args = list(self.extra_args)
        for i, arg in enumerate(args):
            name, eq, value = arg.partition("=")
            if name in ("--tp", "--tp-size", "--tensor-parallel-size"):
                value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
                try:
                    return int(value)
                except ValueError:
                    raise ValueError(f"{name} needs a number, not {value!r}") from None
        return 1

    def validate(self) -> None:
        if self.servers < 1:
            raise ValueError(f"--launch-servers must be >= 1, not {self.servers}")
        if self.gpus() < 1:
            raise ValueError(f"each server needs >= 1 GPU, not {self.gpus()}")
        if not 0 < self.base_port <= 65535 - self.servers:
            raise ValueError(f"base port {self.base_port} leaves no room for {self.servers} servers")
        if not list(self.command):
            raise ValueError("the launch command is empty")
        if self.max_restarts < 0:
            raise ValueError("max_restarts must be >= 0")


def parse_command(text: str | None) -> tuple[str, ...]:
    """``--launch-command`` / ``AGENTR1_SGLANG_LAUNCH_COMMAND`` as argv (shell quoting); default SGLang's."""
    return tuple(shlex.split(text)) if text and text.strip() else DEFAULT_COMMAND


def launch_servers(settings: GatewaySettings, *, on_give_up: Callable[[LaunchError], None] | None = None
                   ) -> SGLangLauncher:
    """Start the SGLang servers ``settings.launch`` describes for ``settings.model`` and wait until they
    are healthy (``agentr1 gateway --launch`` and the trainer's ``rollout.launch`` both come here).
    Raises :class:`LaunchError` (a server failed) or ``ValueError`` (a bad option)."""

    if settings.backend != "sglang":
        raise ValueError(f"launch starts SGLang servers: it needs backend sglang, not {settings.backend!r}")
    spec = LaunchSpec(model_path=str(resolve_model(settings.model)), servers=settings.launch.servers,
                      base_port=settings.launch.port, extra_args=shlex.split(settings.launch.args),
                      command=parse_command(settings.launch.command), log_dir=settings.launch.log_dir,
                      startup_timeout_s=settings.launch.timeout_s)
    launcher = SGLangLauncher(spec, on_give_up=on_give_up)
    launcher.start()
    return launcher


class _Server:
    """One launched server: its argv, log and process, and how often it was restarted."""

    def __init__(self, spec: LaunchSpec, index: int, log_dir: Path) -> None:
        self.index = index
        self.port = spec.base_port + index
        self.url = f"http://{'127.0.0.1' if spec.host in ('0.0.0.0', '::') else spec.host}:{self.port}"
        self.log_path = log_dir / f"sglang-{index}.log"
        self.argv = [*spec.command, "--model-path", spec.model_path, "--host", spec.host, "--port", str(self.port),
                     "--base-gpu-id", str(index * spec.gpus()), *spec.extra_args]
        self.env = {**os.environ, **spec.env}
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def spawn(self) -> None:
        with self.log_path.open("ab") as out:
            out.write(f"\n--- agentr1: starting {shlex.join(self.argv)}\n".encode())
            out.flush()
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=self.env, start_new_session=True)  # own group: stop its children too
        log.info("SGLang server %d: pid %d on %s (log %s)", self.index, self.process.pid, self.url, self.log_path)

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def signal_group(self, sig: signal.Signals) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout_s: float) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout_s``, reap the process."""
        if self.process is None:
            return
        self.signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("SGLang server %d ignored SIGTERM for %.0f s: SIGKILL", self.index, timeout_s)
        self.signal_group(signal.SIGKILL)  # whatever is left of the group (children that outlived the leader)
        if self.process.poll() is None:
            self.process.wait()


class SGLangLauncher:
    """Start, supervise and stop SGLang servers (see the module docstring); a context manager."""

    def __init__(self, spec: LaunchSpec, *, on_give_up: Callable[[LaunchError], None] | None = None,
                 poll_interval_s: float = 0.5) -> None:
        spec.validate()
        self.spec = spec
        self.on_give_up = on_give_up
        self.poll_interval_s = poll_interval_s
        self.log_dir = Path(spec.log_dir or tempfile.mkdtemp(prefix="agentr1-sglang-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.servers = [_Server(spec, i, self.log_dir) for i in range(spec.servers)]
        self.error: LaunchError | None = None  # set when supervision gave up
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    @property
    def pids(self) -> list[int]:
        return [s.process.pid for s in self.servers if s.process is not None]

    # -- start ----------------------------------------------------------------------------

    def start(self) -> list[str]:
        """Launch every server and wait until all are healthy; returns their URLs. On failure every
        server is stopped and :class:`LaunchError` says which one failed and shows its log."""
        for server in self.servers:
            server.spawn()
        try:
            self._wait_healthy(self.servers)
        except BaseException:
            self._stop_all()
            raise
        self._thread = threading.Thread(target=self._supervise, name="sglang-supervisor", daemon=True)
        self._thread.start()
        return self.urls

    def _wait_healthy(self, servers: list[_Server]) -> None:
        deadline = time.monotonic() + self.spec.startup_timeout_s
        pending = list(servers)
        with httpx.Client(timeout=5.0) as client:
            while pending:
                for server in list(pending):
                    code = server.exit_code()
                    if code is not None:
                        raise LaunchError(f"SGLang server {server.index} ({server.url}) exited with code {code} "
                                          f"before it was healthy; last lines of {server.log_path}:\n{server.tail()}")
                    if _healthy(client, server.url):
                        log.info("SGLang server %d healthy at %s", server.index, server.url)
                        pending.remove(server)
                if not pending:
                    return
                if time.monotonic() > deadline:
                    server = pending[0]
                    raise LaunchError(f"SGLang server {server.index} ({server.url}) was not healthy after "
                                      f"{self.spec.startup_timeout_s:.0f} s; last lines of {server.log_path}:\n"
                                      f"{server.tail()}")
                if self._stopping.wait(self.poll_interval_s):
                    raise LaunchError("the launch was stopped before the servers were healthy")

    # -- supervise ------------------------------------------------------------------------

    def _supervise(self) -> None:
        while not self._stopping.wait(self.poll_interval_s):
            for server in self.servers:
                code = server.exit_code()
                if code is None or self._stopping.is_set():
                    continue
                if server.restarts >= self.spec.max_restarts:
                    self._give_up(LaunchError(
                        f"SGLang server {server.index} ({server.url}) exited with code {code} after "
                        f"{server.restarts} restarts; giving up. Last lines of {server.log_path}:\n{server.tail()}"))
                    return
                delay = min(self.spec.backoff_s * 2 ** server.restarts, MAX_BACKOFF_S)
                log.warning("SGLang server %d exited with code %s; restart %d/%d in %.1f s (log %s)", server.index,
                            code, server.restarts + 1, self.spec.max_restarts, delay, server.log_path)
                server.stop(self.spec.stop_timeout_s)  # what is left of its group (SGLang's subprocesses) frees the GPU
                if self._stopping.wait(delay):
                    return
                server.restarts += 1
                server.spawn()
                try:
                    self._wait_healthy([server])
                except LaunchError as exc:
                    if self._stopping.is_set():
                        return
                    log.warning("%s", exc)  # exited again or never healthy: the next round counts it
                    if server.exit_code() is None:
                        server.stop(self.spec.stop_timeout_s)

    def _give_up(self, error: LaunchError) -> None:
        log.error("%s", error)
        self.error = error
        if self.on_give_up is not None:
            self.on_give_up(error)

    # -- stop -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop supervising, then stop every server (SIGTERM, SIGKILL after ``stop_timeout_s``)."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._stop_all()

    def _stop_all(self) -> None:
        threads = [threading.Thread(target=s.stop, args=(self.spec.stop_timeout_s,)) for s in self.servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def __enter__(self) -> SGLangLauncher:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url + "/health").status_code == 200
    except httpx.HTTPError:
        return False
