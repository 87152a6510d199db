"""The gateways the peer benchmark compares, each behind one small class: how to start it, open a
session, where its chat endpoint is, and how many calls its store holds.

- ``agentr1``: ``agentr1 gateway --backend vllm --backend-url BACKEND`` (token-id ``/v1/completions``;
  the gateway renders, tokenises, decodes and parses itself), durable SQLite store (answers after
  the commit). Steps read from its database (``agentr1.store.TraceStore``).
- ``rllm``: ``rllm-model-gateway --worker BACKEND/v1 --store sqlite`` 0.1.0: forwards the chat request
  with ``logprobs`` and ``return_token_ids`` added; traces written to SQLite by a background task
  after the answer (``sync_traces`` off, its default). Calls read from its SQLite file after
  ``POST /admin/flush``.
- ``agl``: Agent Lightning 1.0.2 ``agl-server`` (its shipped uvicorn settings: keep-alive 120 s,
  access log on), the backend registered with ``POST /api/models``, one rollout per session
  (``POST /api/rollouts``), calls through ``/proxy/rollout/{id}/attempt/0/mode/train/openai/v1``;
  events kept in memory, read back with ``GET /api/rollouts/{id}/events``.
- ``direct``: the backend itself, the baseline.

The peers live in their own Python 3.12 venv (:func:`ensure_peers_venv`).
"""

from __future__ import annotations

import glob
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

__all__ = [
    "PEER_PACKAGES",
    "RLLM",
    "AgentLightning",
    "AgentR1",
    "Direct",
    "Gateway",
    "ensure_peers_venv",
    "start_process",
    "wait_ready",
]

PEER_PACKAGES = ["agentlightning==1.0.2", "rllm-model-gateway==0.1.0"]
ROOT = Path(__file__).resolve().parent.parent


def _python312() -> str:
    """A Python 3.12 that runs (a pyenv shim is on PATH even where pyenv's selected version lacks 3.12)."""
    candidates = [shutil.which("python3.12"), *sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.12*/bin/python3.12")))]
    for found in filter(None, candidates):
        if subprocess.run([found, "--version"], capture_output=True).returncode == 0:
            return found
    raise SystemExit("the peers need Python 3.12 (python3.12 not found); pass --peers-venv of a ready venv")


def ensure_peers_venv(venv: Path) -> Path:
    """The peers' venv at ``venv``, created and filled with :data:`PEER_PACKAGES` if it lacks them.
    The same by hand: ``python3.12 -m venv VENV && VENV/bin/pip install agentlightning==1.0.2
    rllm-model-gateway==0.1.0``."""
    ready = (venv / "bin" / "agl-server").exists() and (venv / "bin" / "rllm-model-gateway").exists()
    if not ready:
        print(f"installing {' '.join(PEER_PACKAGES)} into {venv}", flush=True)
        if not (venv / "bin" / "python").exists():
            subprocess.run([_python312(), "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *PEER_PACKAGES], check=True)
    return venv


def start_process(cmd: list[str], *, cwd: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def wait_ready(url: str, proc: subprocess.Popen, *, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


class Gateway:
    """One system under test. ``open_session`` returns the OpenAI base URL of a new session."""

    name = "?"
    label = "?"
    proc: subprocess.Popen | None = None

    def __init__(self, port: int, backend_url: str, tmp: Path, venv: Path | None = None) -> None:
        self.port, self.backend_url, self.tmp, self.venv = port, backend_url, tmp, venv  # venv: the peers'
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        raise NotImplementedError

    async def open_session(self, client: httpx.AsyncClient, tag: str) -> str:
        raise NotImplementedError

    def stored(self, sessions: list[str]) -> int | None:
        """Calls stored for these session ids (as :meth:`open_session` saw them), or None if unknown."""
        return None

    def peer_command(self, name: str) -> str:
        """A command of the peers' venv."""
        if self.venv is None:
            raise ValueError(f"{self.name} runs from the peers' venv: pass venv=")
        return str(self.venv / "bin" / name)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Direct(Gateway):
    name, label = "direct", "direct to the backend (baseline)"

    def start(self) -> None:
        self.url = self.backend_url

    async def open_session(self, client: httpx.AsyncClient, tag: str) -> str:
        return f"{self.backend_url}/v1"


class AgentR1(Gateway):
    name, label = "agentr1", "agentr1 (`--backend vllm`, durable SQLite)"

    def start(self) -> None:
        self.db = f"sqlite:///{self.tmp / 'agentr1.db'}"
        cmd = [str(Path(sys.executable).parent / "agentr1"), "gateway", "--backend", "vllm", "--backend-url",
               self.backend_url, "--model", "smollm2", "--db", self.db, "--port", str(self.port),
               "--accept-any-model", "--log-level", "warning"]
        self.proc = start_process(cmd, cwd=self.tmp, log=self.tmp / "agentr1.log", env={"HF_HUB_OFFLINE": "1"})
        wait_ready(f"{self.url}/ready", self.proc)

    async def open_session(self, client: httpx.AsyncClient, tag: str) -> str:
        r = await client.post(f"{self.url}/sessions", json={"task_id": tag})
        r.raise_for_status()
        self._ids = getattr(self, "_ids", {})
        created = r.json()
        self._ids[created["base_url"]] = created["id"]
        return str(created["base_url"])

    def stored(self, sessions: list[str]) -> int | None:
        from agentr1.store import TraceStore

        ids = {self._ids[s] for s in sessions}
        with TraceStore.open(self.db, migrate=False) as store:
            found = [s for s in store.list_sessions(None, limit=10**6) if s.id in ids]
            store.engine.dispose()
        return sum(s.n_steps for s in found)


class RLLM(Gateway):
    name, label = "rllm", "rLLM model gateway 0.1.0 (SQLite store)"

    def start(self) -> None:
        self.db_path = self.tmp / "rllm.db"
        cmd = [self.peer_command("rllm-model-gateway"), "--host", "127.0.0.1", "--port", str(self.port),
               "--worker", f"{self.backend_url}/v1", "--store", "sqlite", "--db-path", str(self.db_path),
               "--log-level", "warning"]
        self.proc = start_process(cmd, cwd=self.tmp, log=self.tmp / "rllm.log")
        wait_ready(f"{self.url}/health", self.proc)

    async def open_session(self, client: httpx.AsyncClient, tag: str) -> str:
        r = await client.post(f"{self.url}/sessions", json={"metadata": {"task": tag}})
        r.raise_for_status()
        return f"{self.url}{r.json()['url']}"

    def stored(self, sessions: list[str]) -> int | None:
        """Traces are written by background tasks after the answer: count until the number stops
        growing for 2 s (``/admin/flush`` does not wait for those tasks)."""
        httpx.post(f"{self.url}/admin/flush", timeout=120).raise_for_status()
        ids = [(s.split("/sessions/")[1].split("/")[0],) for s in sessions]
        last, steady_since = -1, time.monotonic()
        while time.monotonic() - steady_since < 2.0:
            with sqlite3.connect(self.db_path, timeout=30) as db:
                db.execute("CREATE TEMP TABLE wanted (id TEXT PRIMARY KEY)")
                db.executemany("INSERT INTO wanted VALUES (?)", ids)
                (count,) = db.execute("SELECT COUNT(*) FROM trace_sessions JOIN wanted ON session_id = wanted.id"
                                      ).fetchone()
            if count != last:
                last, steady_since = count, time.monotonic()
            time.sleep(0.2)
        return int(last)


class AgentLightning(Gateway):
    name, label = "agl", "Agent Lightning 1.0.2 (in memory)"

    def start(self) -> None:
        cmd = [self.peer_command("agl-server"), "host=127.0.0.1", f"port={self.port}",
               "default_proxy.model_name=bench", f"hydra.run.dir={self.tmp / 'agl-hydra'}"]
        self.proc = start_process(cmd, cwd=self.tmp, log=self.tmp / "agl.log")
        wait_ready(f"{self.url}/healthz", self.proc)
        r = httpx.post(f"{self.url}/api/models", json=[{"model": "bench", "endpoint": f"{self.backend_url}/v1"}])
        r.raise_for_status()

    async def open_session(self, client: httpx.AsyncClient, tag: str) -> str:
        rollout = f"{tag}-{uuid.uuid4().hex[:8]}"
        r = await client.post(f"{self.url}/api/rollouts", json=[{"input": {"task": tag}, "rollout_id": rollout}])
        r.raise_for_status()
        return f"{self.url}/proxy/rollout/{rollout}/attempt/0/mode/train/openai/v1"

    def stored(self, sessions: list[str]) -> int | None:
        total = 0
        with httpx.Client(timeout=60) as client:
            for s in sessions:
                rollout = s.split("/proxy/rollout/")[1].split("/")[0]
                r = client.get(f"{self.url}/api/rollouts/{rollout}/events", params={"event_type": "model_request"})
                r.raise_for_status()
                total += len(r.json())
        return total
