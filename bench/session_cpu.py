"""The gateway's CPU for one agent session, by request: open it, one chat call, end it.

    .venv/bin/python bench/session_cpu.py                 # 200 sessions x 3 rounds, ~1 minute
    .venv/bin/python bench/session_cpu.py --sessions 400 --rounds 5

An embedded gateway (``agentr1.gateway.EmbeddedGateway``: uvicorn on a thread, SQLite store, the instant backend
answering a fixed sentence with SmolLM2's tokenizer and chat template) serves a client in another process, one
request at a time: ``POST /sessions`` for every session, then one chat completion each (the calculator example's
system prompt, a question and its tool), then ``POST /sessions/{id}/finish`` each. The gateway thread's CPU clock
(user + system, ``time.pthread_getcpuclockid``) is read around each phase: milliseconds of gateway CPU per session
for each kind of request. Then the same with the sessions opened and ended in lists of 128 (``POST /sessions`` with
a list, ``POST /sessions/finish``), as the trainer does (``agentr1.sdk.SessionBatches``). The baseline, in the same
run: a bare FastAPI app with the same three single routes and pydantic bodies, answering at once
(``bench/gateway_server.py``'s ``floor_app``), under the same uvicorn settings (``BackgroundServer``) and the same
client. What agentr1 adds is the difference; a rollout of one-call sessions pays open + chat + finish on one event
loop (docs/benchmarks.md, the gateway rows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the examples package
sys.path.insert(0, str(ROOT / "bench"))  # gateway_server's bare app
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

KINDS = ("open", "chat", "finish")
LIST_KINDS = ("open_list", "chat", "finish_list")  # as the trainer opens and ends sessions: many to a request
LIST = 128  # sessions a list


def run_client(url: str, kind: str, state: str, sessions: int) -> None:
    """One phase, sequentially: ``open`` writes the sessions (id, key) to ``state``; the others read them."""
    import httpx
    from examples.calculator.calculator import CALCULATOR, SYSTEM

    with httpx.Client(timeout=60) as client:
        if kind == "open_list":
            opened = []
            for start in range(0, sessions, LIST):
                r = client.post(f"{url}/sessions", json=[
                    {"task_id": f"t{i}", "group_id": "g", "run_id": "bench", "metadata": {"step": 0, "sample": i}}
                    for i in range(start, min(sessions, start + LIST))])
                r.raise_for_status()
                opened += [(s["id"], s["api_key"]) for s in r.json()]
            Path(state).write_text(json.dumps(opened))
            return
        if kind == "finish_list":
            ends = json.loads(Path(state).read_text())
            for start in range(0, sessions, LIST):
                r = client.post(f"{url}/sessions/finish", json=[{"id": sid, "api_key": key, "status": "finished"}
                                                                for sid, key in ends[start:start + LIST]])
                r.raise_for_status()
                assert all("error" not in x for x in r.json()["results"]), r.text
            return
        if kind == "open":
            opened = []
            for i in range(sessions):
                r = client.post(f"{url}/sessions", json={"task_id": f"t{i}", "group_id": "g", "run_id": "bench",
                                                        "metadata": {"step": 0, "sample": i}})
                r.raise_for_status()
                opened.append((r.json()["id"], r.json().get("api_key", "")))
            Path(state).write_text(json.dumps(opened))
            return
        for i, (sid, key) in enumerate(json.loads(Path(state).read_text())):
            headers = {"Authorization": f"Bearer {key}"}
            if kind == "chat":
                body = {"model": "policy", "tools": [CALCULATOR], "max_tokens": 64, "temperature": 1.0,
                        "messages": [{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": f"What is {i} + 3?"}]}
                r = client.post(f"{url}/sessions/{sid}/v1/chat/completions", json=body, headers=headers)
            else:
                r = client.post(f"{url}/sessions/{sid}/finish", json={"status": "finished"}, headers=headers)
            r.raise_for_status()


def measure(url: str, thread: Any, sessions: int, rounds: int, tmp: Path,
            kinds: tuple[str, ...] = KINDS) -> dict[str, list[float]]:
    """Gateway-thread CPU ms per session of each kind of request, one value per round."""
    clock = time.pthread_getcpuclockid(thread.ident)
    out: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(rounds):
        state = str(tmp / f"sessions{r}-{kinds[0]}.json")
        for kind in kinds:
            before = time.clock_gettime(clock)
            subprocess.run([sys.executable, __file__, "--client", url, kind, state, str(sessions)], check=True)
            out[kind].append(1000 * (time.clock_gettime(clock) - before) / sessions)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client", nargs=4, metavar=("URL", "KIND", "STATE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        url, kind, state, n = args.client
        run_client(url, kind, state, int(n))
        return

    from agentr1.core import resolve_model
    from agentr1.core.rendering import load_renderer
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends.instant import InstantBackend
    from agentr1.gateway.embedded import EmbeddedGateway
    from agentr1.gateway.server import BackgroundServer, free_port
    from agentr1.gateway.settings import GatewaySettings
    from agentr1.store import TraceStore
    from gateway_server import floor_app

    with tempfile.TemporaryDirectory(prefix="session-cpu-") as folder:
        tmp = Path(folder)
        db = f"sqlite:///{tmp / 'traces.db'}"
        renderer = load_renderer(resolve_model("smollm2"))
        backend = InstantBackend(renderer.tokenizer, "The answer is 12, which is the sum of the two numbers.",
                                 model_name="policy")
        with TraceStore.open(db) as store:
            gateway = EmbeddedGateway(GatewaySettings(db=db, default_run="bench", accept_any_model=True,
                                                      engine=EngineOptions(device="cpu")),
                                      store=store, backend=backend, renderer=renderer).start()
            try:
                ours = measure(gateway.url, gateway.server.thread, args.sessions, args.rounds, tmp)
                lists = measure(gateway.url, gateway.server.thread, args.sessions, args.rounds, tmp, LIST_KINDS)
            finally:
                gateway.stop()
        port = free_port()
        server = BackgroundServer(floor_app(port), port=port)
        with server as url:
            floor = measure(url, server.thread, args.sessions, args.rounds, tmp)

    print(f"gateway-thread CPU ms per request, {args.sessions} sessions x {args.rounds} rounds "
          f"(median of rounds; all rounds)\n")
    print("| request | agentr1 | bare FastAPI | agentr1 - bare |")
    print("|---|---:|---:|---:|")
    for kind in (*KINDS, "session"):
        a = [sum(ours[k][r] for k in KINDS) for r in range(args.rounds)] if kind == "session" else ours[kind]
        f = [sum(floor[k][r] for k in KINDS) for r in range(args.rounds)] if kind == "session" else floor[kind]
        ma, mf = statistics.median(a), statistics.median(f)
        print(f"| {kind} | {ma:.2f} ({', '.join(f'{x:.2f}' for x in a)}) | {mf:.2f} ({', '.join(f'{x:.2f}' for x in f)}) "
              f"| {ma - mf:.2f} |")
    single = [sum(ours[k][r] for k in KINDS) for r in range(args.rounds)]
    listed = [sum(lists[k][r] for k in LIST_KINDS) for r in range(args.rounds)]
    print(f"\nsessions opened and ended in lists of {LIST} (as the trainer does), agentr1, ms per session:")
    for kind in LIST_KINDS:
        print(f"  {kind}: {statistics.median(lists[kind]):.2f} ({', '.join(f'{x:.2f}' for x in lists[kind])})")
    print(f"  session: {statistics.median(listed):.2f} against {statistics.median(single):.2f} one request each "
          f"({statistics.median(single) / statistics.median(listed):.2f}x less)")
    print(json.dumps({"bench": "session_cpu", "sessions": args.sessions, "agentr1": ours, "floor": floor,
                      "agentr1_lists": lists, "loadavg": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
