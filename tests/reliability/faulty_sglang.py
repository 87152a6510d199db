"""A misbehaving SGLang server, for fault tests of the gateway in front of it.

Healthy, it answers SGLang 0.5.x's ``POST /generate`` as the released server does (see
tests/backends/fake_sglang.py and DESIGN.md section 4): ``{text, output_ids, meta_info{id,
finish_reason{type, matched}, prompt_tokens, completion_tokens, cached_tokens, weight_version,
output_token_logprobs [[logprob, id, null]]}}``, and with ``stream`` true ``data: {...}`` events
with cumulative ids and logprobs, the last carrying ``finish_reason``, then ``data: [DONE]``. Its
answer is always the same short reply (token ids of the tiny model's tokenizer), so tests do not
depend on a model. ``/v1/models`` and ``/get_model_info`` are there for the backend's start.

``FaultState.mode`` makes it misbehave the way real servers do:

- ``"hang"``: accept the request and answer nothing for 3 s (a wedged engine): the client times out;
- ``"garbage"``: answer 200 with an HTML page (a proxy's error page, a wrong port);
- ``"wrong_shape"``: answer 200 JSON that is not a /generate answer (ids as strings, no logprobs);
- ``"die"``: send the headers (and, streaming, the first token events), then drop the connection
  without ending the body, as a server process that is killed mid-answer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

REPLY = "the answer is four"


@dataclass
class FaultState:
    reply_ids: list[int]
    end_id: int
    mode: str = "ok"
    requests: int = 0


class ServerDied(Exception):
    """Raised inside a response body: uvicorn then drops the connection mid-body."""


def _answer(state: FaultState, prompt_len: int, upto: int, *, finished: bool) -> dict[str, Any]:
    ids = [*state.reply_ids, state.end_id][:upto]
    meta: dict[str, Any] = {
        "id": "rid", "prompt_tokens": prompt_len, "completion_tokens": len(ids), "cached_tokens": 0,
        "weight_version": "default", "output_token_logprobs": [[-0.5, t, None] for t in ids],
        "finish_reason": {"type": "stop", "matched": state.end_id} if finished else None,
    }
    return {"output_ids": ids, "meta_info": meta}


def faulty_sglang_app(state: FaultState) -> FastAPI:
    app = FastAPI()
    full = len(state.reply_ids) + 1

    @app.get("/health")
    async def health() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/ready")
    async def ready() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "faulty", "object": "model", "max_model_len": 2048}]}

    @app.get("/get_model_info")
    async def model_info() -> dict[str, Any]:
        return {"model_path": "faulty", "weight_version": "default"}

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        state.requests += 1
        body = await request.json()
        prompt_len, mode = len(body["input_ids"]), state.mode
        if mode == "hang":
            await asyncio.sleep(3)  # longer than the client waits; short, so the server can stop
        if mode == "garbage":
            return Response("<html><body>502 Bad Gateway</body></html>", media_type="text/html")
        if mode == "wrong_shape":
            return JSONResponse({"output_ids": ["four"], "meta_info": {"completion_tokens": "x"}})
        if not body.get("stream"):
            if mode == "die":
                return StreamingResponse(_die_after([b'{"output_ids": [']), media_type="application/json")
            return JSONResponse(_answer(state, prompt_len, full, finished=True))
        events = [f"data: {json.dumps(_answer(state, prompt_len, n, finished=n == full))}\n\n".encode()
                  for n in range(1, full + 1)]
        if mode == "die":
            return StreamingResponse(_die_after(events[:2]), media_type="text/event-stream")
        return StreamingResponse(_chunks([*events, b"data: [DONE]\n\n"]), media_type="text/event-stream")

    return app


async def _chunks(chunks: list[bytes]):  # type: ignore[no-untyped-def]
    for chunk in chunks:
        yield chunk
        await asyncio.sleep(0.01)


async def _die_after(chunks: list[bytes]):  # type: ignore[no-untyped-def]
    async for chunk in _chunks(chunks):
        yield chunk
    raise ServerDied("the server process died mid-answer")
