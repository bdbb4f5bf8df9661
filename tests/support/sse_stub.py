"""A scripted llama-server look-alike on aiohttp (a real socket, its own event loop in a thread) for the latency
proxy: /health, key-checked /v1/chat/completions answering from `script` either as JSON or as a server-sent
event stream (one event per token, `gap_s` apart), so TTFT, ITL and tool calls are known in advance.

A script step: {"content": "..."} (streamed word by word when the request streams) or {"tool_calls": [...]}
with arguments streamed in fragments, or (status, message) for an error body.

`paced_by(sent)`, when set, is asked before each streamed event whether the reader has taken the `sent` events
written so far; the stub waits for it and then `gap_s`. Unpaced, a reader behind a busy CPU that reads the first
event late (or two events in one read) sees gaps shorter than the stub slept; paced, every gap it sees is >= `gap_s`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web


class SseStub:
    def __init__(self, port: int, api_key: str, gap_s: float = 0.01) -> None:
        self.port, self.api_key, self.gap_s = port, api_key, gap_s
        self.script: list[Any] = []
        self.headers_seen: list[dict[str, str]] = []
        self.paced_by: Callable[[int], bool] | None = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None

    def __enter__(self) -> SseStub:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.thread.is_alive():
            return  # stopped already (a test that takes the upstream away)
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def _health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.headers_seen.append(dict(request.headers))
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response(
                {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}, status=401
            )
        body = await request.json()
        step = self.script.pop(0) if self.script else (500, "the stub's script is used up")
        if isinstance(step, tuple):
            return web.json_response(
                {"error": {"code": step[0], "message": step[1], "type": "server_error"}}, status=step[0]
            )
        if not body.get("stream"):
            finish = "tool_calls" if step.get("tool_calls") else "stop"
            return web.json_response(
                {
                    "id": "chatcmpl-stub",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "m",
                    "choices": [
                        {"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": None, **step}}
                    ],
                }
            )
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        for sent, delta in enumerate(_deltas(step)):
            await self._reader_took(sent)
            await asyncio.sleep(self.gap_s)
            event = {
                "id": "chatcmpl-stub",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
            await reply.write(f"data: {json.dumps(event)}\n\n".encode())
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        return reply

    async def _reader_took(self, sent: int, timeout_s: float = 10.0) -> None:
        """Waits until `paced_by(sent)` holds (a reader that never takes them fails its own assertions later)."""
        deadline = time.monotonic() + timeout_s
        while self.paced_by is not None and not self.paced_by(sent) and time.monotonic() < deadline:
            await asyncio.sleep(0.001)


def _deltas(step: dict[str, Any]) -> list[dict[str, Any]]:
    if step.get("tool_calls"):
        deltas = []
        for index, call in enumerate(step["tool_calls"]):
            arguments = call["function"]["arguments"]
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            deltas += [
                {"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + 4]}}]}
                for i in range(0, len(arguments), 4)
            ]
        return deltas
    return [{"content": word + " "} for word in str(step.get("content", "")).split()]
