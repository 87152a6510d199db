"""A process that starts an engine process and one gateway shard on it, prints their pids and the shard's URL, and
waits to be killed (tests/gateway/test_gateway_shards_process.py)."""

from __future__ import annotations

import sys
import time

from agentr1.engine import EngineOptions
from agentr1.gateway import GatewaySettings, GatewayShards
from agentr1.gateway.backends import LocalBackend

if __name__ == "__main__":
    model, db = sys.argv[1], sys.argv[2]
    owner = LocalBackend(model, EngineOptions(device="cpu", threads=1), engine_process=True)
    owner.engine.start()
    settings = GatewaySettings(db=db, model=model, engine=EngineOptions(device="cpu"), accept_any_model=True,
                               default_run="shards")
    shards = GatewayShards(settings, owner.engine_address, 1).start()
    print(shards.processes[0].pid, owner.engine._remote.process.pid, shards.urls[0], flush=True)
    time.sleep(600)
