"""A scripted OpenAI-compatible server on a real socket (stdlib http.server in a thread), for verify's
failure paths behind the real openai client: /health, /v1/models, /v1/chat/completions, /apply-template.

Completions answer from `script` in order (then an error, so an unexpected extra request shows); each is a
message dict (returned as llama-server returns a choice; a "finish_reason" key in it sets the choice's) or
`(status, error message)` for an error body.
`/apply-template` renders every message as JSON, as a template that keeps everything would; fields in
`drop` are left out (a server that drops reasoning_content). Every request body is kept in `received`.
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from support.json_http import JsonHandler

PORTS = range(18700, 18750)  # this branch's test ports


class ChatStub:
    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.script: list[Any] = []
        self.drop: set[str] = set()
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.server = _bind(self)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> ChatStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def completions(self) -> list[dict[str, Any]]:
        return [body for path, body in self.received if path == "/v1/chat/completions"]

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.received.append((path, body))
        if path == "/apply-template":
            lines = [json.dumps({k: v for k, v in m.items() if k not in self.drop}) for m in body["messages"]]
            return 200, {"prompt": "\n".join(lines)}
        if not self.script:
            return 500, {"error": {"code": 500, "message": "the stub's script is used up", "type": "server_error"}}
        step = self.script.pop(0)
        if isinstance(step, tuple):
            status, message = step
            return status, {"error": {"code": status, "message": message, "type": "server_error"}}
        step = dict(step)  # a step may say its finish_reason ("length": the token budget ran out)
        finish = step.pop("finish_reason", None) or ("tool_calls" if step.get("tool_calls") else "stop")
        return 200, {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 1796205741,
            "model": self.alias,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **step}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }


def _bind(stub: ChatStub) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"stub": stub})
    for port in PORTS:
        try:
            return ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError:
            continue
    raise RuntimeError(f"no free port in {PORTS}")


class _Handler(JsonHandler):
    stub: ChatStub

    def do_GET(self) -> None:  # http.server calls it by this name
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": self.stub.alias, "aliases": [self.stub.alias], "object": "model", "owned_by": "llamacpp"}
                    ],
                },
            )
        else:
            self.send_json(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path not in ("/v1/chat/completions", "/apply-template"):
            self.send_json(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})
            return
        self.send_json(*self.stub.answer(self.path, body))
