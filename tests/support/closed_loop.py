"""A steady closed-loop client (issue 29): `workers` threads, each sending its next chat request as soon as the last
one ended (half of them streaming; with `tools`, every other request offers a tool, as an agent's do), every reply
read to its end and judged complete or failed. Used by the handover and fleet integration tests and
bench/handover.py."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Self

import httpx

from kimik3_reconciler.verify.checks import TOOL_PROMPT, WEATHER_TOOL  # verify's own tool request


@dataclass(frozen=True)
class Outcome:
    started: float  # time.monotonic()
    ended: float
    stream: bool
    status: int  # 0: no HTTP answer (refused, reset)
    complete: bool  # a 200 whose body ended as llama-server ends one (finish_reason; [DONE] when streamed)
    error: str = ""
    tools: bool = False  # the request offered a tool (the reply may call it or answer)

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def _complete(body: str, stream: bool) -> bool:
    if not stream:
        try:
            return bool(json.loads(body)["choices"][0].get("finish_reason"))
        except (ValueError, KeyError, IndexError, TypeError):
            return False
    events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    if events[-1:] != ["[DONE]"]:
        return False
    # An event without choices (an error sent mid-stream, a usage chunk) finishes nothing: a stream whose only
    # events are such is incomplete, counted as a failed request rather than crashing the worker's thread.
    return any(
        (choices := json.loads(e).get("choices")) and choices[0].get("finish_reason")
        for e in events[:-1]
        if e.startswith("{")
    )


class Workers:
    """Daemon threads started on entering, stopped on leaving: `_stop` set, each joined for up to `join_s`
    (a reply still being read gets that long). Subclasses fill `_threads` with their loop's threads."""

    join_s: float = 300.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.join_s)


class ClosedLoop(Workers):
    def __init__(
        self,
        url: str,
        workers: int = 4,
        max_tokens: int = 8,
        api_key: str | None = None,
        timeout_s: float = 900.0,
        model: str | None = None,
        tools: bool = False,
    ):
        super().__init__()
        self.url, self.workers, self.max_tokens, self.timeout_s = url, workers, max_tokens, timeout_s
        self.join_s = timeout_s
        self.model = model  # a router (smg) wants the served model's name; llama-server alone does not
        self.tools = tools
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i % 2 == 0,), daemon=True) for i in range(workers)]

    def done(self) -> int:
        with self._lock:
            return len(self.outcomes)

    def wait_for(self, count: int, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.done() < count:
            assert time.monotonic() < deadline, f"the load finished {self.done()} of {count} requests"
            time.sleep(0.05)

    def _run(self, stream: bool) -> None:
        sent = 0
        with httpx.Client(timeout=self.timeout_s) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                offer = self.tools and sent % 2 == 1
                sent += 1
                body = {
                    "messages": [{"role": "user", "content": TOOL_PROMPT if offer else "Say something."}],
                    "max_tokens": self.max_tokens,
                    "stream": stream,
                    **({"model": self.model} if self.model else {}),
                    **({"tools": [WEATHER_TOOL]} if offer else {}),
                }
                try:
                    with client.stream(
                        "POST", f"{self.url}/v1/chat/completions", json=body, headers=self.headers
                    ) as reply:
                        text = reply.read().decode("utf-8", "replace")
                    outcome = Outcome(
                        started,
                        time.monotonic(),
                        stream,
                        reply.status_code,
                        reply.status_code == 200 and _complete(text, stream),
                        "" if reply.status_code == 200 else text[:200],
                        offer,
                    )
                except httpx.HTTPError as exc:
                    outcome = Outcome(
                        started, time.monotonic(), stream, 0, False, f"{type(exc).__name__}: {exc}", offer
                    )
                    time.sleep(0.2)  # a refused connection answers at once: no busy loop
                with self._lock:
                    self.outcomes.append(outcome)

    def failed(self) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if not o.complete]

    def between(self, start: float, end: float) -> list[Outcome]:
        """Requests that were running at some moment in [start, end]."""
        with self._lock:
            return [o for o in self.outcomes if o.started <= end and o.ended >= start]
