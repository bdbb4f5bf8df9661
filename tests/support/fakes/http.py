"""FakeHttp and FakeChat: llama-server's /health and OpenAI-compatible API, answered from FakeDocker's state."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from kimik3_reconciler.ports import ChatRequest
from support.fakes.docker import FakeDocker


class FakeHttp:
    def __init__(self, docker: FakeDocker):
        self.docker = docker
        self.loading_polls = 1  # answers 503 this many times after a launch, then 200
        self.pages: dict[str, tuple[int, str]] = {}  # url -> (status, body) for get(); else nothing answers
        self.keys_sent: list[str | None] = []  # the api_key of every get(), to check where a key went

    def health(self, url: str) -> str:
        if not any(c["State"]["Status"] == "running" for c in self.docker.containers.values()):
            return "unreachable"
        if self.loading_polls > 0:
            self.loading_polls -= 1
            return "loading"
        return "ok"

    def fetch(self, url: str, dest: Path) -> str:
        raise AssertionError("unit tests use local archives")

    def chat(self, base_url: str, model: str, prompt: str, api_key: str | None) -> str:
        return "fake"

    def free_port(self) -> int:
        return 18999

    def get(self, url: str, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[int, str]:
        self.keys_sent.append(api_key)
        return self.pages.get(url, (0, "ConnectError: refused"))


class FakeChat:
    """llama-server's chat API: serves the `--alias` of running containers, answers scripted replies.

    `replies` are consumed in order (then "fake" text; an exception in the list is raised by its turn);
    every request is kept in `requests`, copied as sent; `error` is raised by every call when set.
    """

    def __init__(self, docker: FakeDocker):
        self.docker = docker
        self.replies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.templated: list[list[dict[str, Any]]] = []
        self.dropped: set[str] = set()  # message fields the fake template leaves out
        self.error: Exception | None = None

    @staticmethod
    def reply(
        content: str | None = "fake",
        reasoning: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        finish: str = "stop",
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        return {"message": message, "finish_reason": finish}

    @staticmethod
    def tool_call(arguments: str, name: str = "get_weather", call_id: str = "call_1") -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    def models(self, base_url: str, api_key: str | None) -> dict[str, Any]:
        if self.error:
            raise self.error
        names = [
            c["spec"].command[c["spec"].command.index("--alias") + 1]
            for c in self.docker.containers.values()
            if c["State"]["Status"] == "running" and "--alias" in c["spec"].command
        ]
        return {"object": "list", "data": [{"id": n, "aliases": [n], "object": "model"} for n in names]}

    def chat(self, request: ChatRequest) -> dict[str, Any]:
        self.requests.append(copy.deepcopy(dataclasses.asdict(request)))
        if self.error:
            raise self.error
        reply = self.replies.pop(0) if self.replies else self.reply()
        if isinstance(reply, Exception):
            raise reply
        return copy.deepcopy(reply)

    def apply_template(self, request: ChatRequest) -> str:
        """Every message as JSON, as a template that keeps everything would; `dropped` fields left out."""
        self.templated.append(copy.deepcopy(request.messages))
        if self.error:
            raise self.error
        shown = ({k: v for k, v in m.items() if k not in self.dropped} for m in request.messages)
        return "\n".join(json.dumps(m) for m in shown)
