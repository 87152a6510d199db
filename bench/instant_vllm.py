"""An HTTP server that answers at once in vLLM's dialects: the backend of the peer benchmark.

    .venv/bin/python bench/instant_vllm.py --port 8200 [--model-dir DIR] [--served-name bench] [--keep-alive-s 120]

It speaks what a vLLM (>= 0.11) OpenAI-compatible server speaks to gateways that record tokens:

- ``POST /v1/chat/completions``: OpenAI chat answer; with ``logprobs: true`` the choice carries
  ``logprobs.content`` ([{token, logprob, bytes, top_logprobs}]); with ``return_token_ids: true``
  the choice carries ``token_ids`` and the answer ``prompt_token_ids`` (the ChatML rendering of the
  messages, tokenised).
- ``POST /v1/completions`` with a token-id ``prompt``: ``logprobs: k`` gives ``tokens`` /
  ``token_logprobs``, ``"token_id:<id>"`` tokens with ``return_tokens_as_token_ids``, ``token_ids``
  and ``prompt_token_ids`` with ``return_token_ids``.
- ``GET /health`` and ``GET /v1/models`` (``max_model_len``).

The reply is fixed: the first 31 tokens of a sentence plus ``<|im_end|>`` (32 tokens, finish
``stop``), cut at ``max_tokens`` (finish ``length``); token ids are the SmolLM2 tokenizer's, so a
gateway that decodes them gets the text back. No model, no sampling: what a gateway adds on top
of it is the gateway's own cost. A raw ASGI app (no framework) under uvicorn, JSON by orjson.
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

__all__ = ["InstantVLLM", "main"]

REPLY = ("The answer is 4. Two plus two makes four, which you can check by counting on your fingers: one, two, "
         "three, four. Is there anything else you would like to know about arithmetic today?")
REPLY_TOKENS = 31
END_TOKEN = "<|im_end|>"
LOGPROB = -0.25


class InstantVLLM:
    """The ASGI app. ``tokenizer_file``: a ``tokenizer.json`` (HF ``tokenizers``)."""

    def __init__(self, tokenizer_file: Path, *, served_name: str = "bench", root: str = "",
                 max_model_len: int = 8192) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.served_name, self.root, self.max_model_len = served_name, root, max_model_len
        end_id = self.tokenizer.token_to_id(END_TOKEN)
        if end_id is None:
            raise ValueError(f"{tokenizer_file} has no {END_TOKEN} token")
        text_ids = self.tokenizer.encode(REPLY, add_special_tokens=False).ids[:REPLY_TOKENS]
        self.ids: list[int] = [*text_ids, end_id]
        self.end_id = end_id
        self.pieces = [self.tokenizer.decode([i], skip_special_tokens=False) for i in self.ids]

    # -- the two generation dialects ------------------------------------------------------

    def _cut(self, body: dict[str, Any]) -> tuple[list[int], str]:
        limit = int(body.get("max_tokens") or 16)
        if limit < len(self.ids):
            return self.ids[:limit], "length"
        return self.ids, "stop"

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode([i for i in ids if i != self.end_id])

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        rendered = "".join(f"<|im_start|>{m.get('role')}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
        prompt_ids = self.tokenizer.encode(rendered + "<|im_start|>assistant\n", add_special_tokens=False).ids
        ids, finish = self._cut(body)
        choice: dict[str, Any] = {
            "index": 0, "message": {"role": "assistant", "content": self._text(ids), "tool_calls": [],
                                    "reasoning_content": None},
            "logprobs": None, "finish_reason": finish, "stop_reason": None,
        }
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [
                {"token": p, "logprob": LOGPROB, "bytes": list(p.encode()), "top_logprobs": []}
                for p in self.pieces[: len(ids)]]}
        answer: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                                  "created": int(time.time()), "model": self.served_name, "choices": [choice],
                                  "usage": _usage(len(prompt_ids), len(ids))}
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
            answer["prompt_token_ids"] = prompt_ids
        return answer

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(i, int) for i in prompt)):
            raise ValueError("this server takes token-id prompts only")
        ids, finish = self._cut(body)
        choice: dict[str, Any] = {"index": 0, "text": self._text(ids), "logprobs": None, "finish_reason": finish,
                                  "stop_reason": None}
        if body.get("logprobs") is not None:
            as_ids = body.get("return_tokens_as_token_ids")
            choice["logprobs"] = {
                "tokens": [f"token_id:{i}" if as_ids else p for i, p in zip(ids, self.pieces, strict=False)],
                "token_logprobs": [LOGPROB] * len(ids), "top_logprobs": None,
                "text_offset": list(range(len(ids))),
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
            choice["prompt_token_ids"] = prompt
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.served_name, "choices": [choice], "usage": _usage(len(prompt), len(ids))}

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.served_name, "object": "model", "owned_by": "vllm",
                                            "root": self.root, "max_model_len": self.max_model_len}]}

    # -- ASGI -----------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "GET" and path == "/health":
            await _answer(send, 200, b"")
        elif method == "GET" and path == "/v1/models":
            await _answer(send, 200, orjson.dumps(self.models()))
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            raw = b""
            while True:
                message = await receive()
                raw += message.get("body", b"")
                if not message.get("more_body"):
                    break
            try:
                body = orjson.loads(raw)
                answer = self.chat(body) if path.endswith("chat/completions") else self.completion(body)
            except (ValueError, KeyError, TypeError) as exc:
                error = {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "BadRequestError",
                                   "param": None, "code": 400}}
                await _answer(send, 400, orjson.dumps(error))
                return
            await _answer(send, 200, orjson.dumps(answer))
        else:
            await _answer(send, 404, orjson.dumps({"error": {"message": f"no route {method} {path}",
                                                             "type": "NotFoundError", "param": None, "code": 404}}))


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model-dir", type=Path, default=None, help="a HF model directory with tokenizer.json "
                        "(default: agentr1's converted SmolLM2-135M-Instruct)")
    parser.add_argument("--served-name", default="bench")
    parser.add_argument("--keep-alive-s", type=float, default=120.0,
                        help="idle connection timeout (vLLM's own default is 5 s; long here so that a gateway's "
                             "connections to the backend are never closed under it in a benchmark)")
    args = parser.parse_args()
    model_dir = args.model_dir
    if model_dir is None:
        from agentr1.core.models import resolve_model

        model_dir = Path(resolve_model("smollm2"))
    import uvicorn

    app = InstantVLLM(model_dir / "tokenizer.json", served_name=args.served_name, root=str(model_dir))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                timeout_keep_alive=args.keep_alive_s)


if __name__ == "__main__":
    main()
