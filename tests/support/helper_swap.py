"""Replace a helper that owns the public port (the exporter with its proxy, or the front) under a real client loop,
as an apply does (the steps, the real process adapter), and count what the clients saw (issue 38 item 2). Upstream:
an endless llama-server look-alike (`TokenServer`). Used by tests/unit/steps/test_helper_swap.py and bench/helper_swap.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from kimik3_reconciler.adapters import real_ports
from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.helpers import EXPORTER, FRONT, Helper
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.records import exporter_key, front_key
from kimik3_reconciler.model.specs import ExporterRun, FrontRun
from kimik3_reconciler.steps.exporter import run_exporter
from kimik3_reconciler.steps.front import run_front
from kimik3_reconciler.steps.report import NullReporter
from support.closed_loop import ClosedLoop
from support.ports import free_port
from support.sse_stub import SseStub


class TokenServer(SseStub):
    """/v1/chat/completions as llama-server ends a reply (finish_reason; `[DONE]` when streamed), `tokens` tokens
    `gap_s` apart, every request, for ever, no key asked; /health 200 (the scripted stub's server, another reply)."""

    def __init__(self, port: int, tokens: int = 8, gap_s: float = 0.01) -> None:
        super().__init__(port, api_key="", gap_s=gap_s)
        self.tokens = tokens

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            await asyncio.sleep(self.gap_s * self.tokens)
            return web.json_response(
                {
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "length",
                            "message": {"role": "assistant", "content": "w " * self.tokens},
                        }
                    ],
                }
            )
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        for i in range(self.tokens):
            await asyncio.sleep(self.gap_s)
            last = i == self.tokens - 1
            event = {
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": "w "}, "finish_reason": "length" if last else None}],
            }
            await reply.write(f"data: {json.dumps(event)}\n\n".encode())
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        return reply


@dataclass(frozen=True)
class SwapResult:
    requests: int
    refused: int  # no connection (ConnectError: nothing listened on the port)
    failed: int  # every request without a complete reply, the refused included
    swap_s: float  # the replacement step, as the apply runs it
    overlapping: int  # requests running at some moment of the swap
    old_gone: bool  # the replaced process exited
    serving: str  # the fingerprint the port's helper answers after the swap
    errors: tuple[str, ...] = ()  # what the failed requests got (one line each)


def _run(
    helper: Helper, config: ExporterConfig | FrontConfig, replace_pid: int | None, hand_over: bool
) -> ExporterRun | FrontRun:
    """The helper's start (replacing `replace_pid`) with `config`, as the plan writes it (planning/helper_step.py)."""
    return helper.run(
        profile=config.profile,
        config=config.to_json(),
        fingerprint=config.fingerprint,
        health_url=config.health_url,
        replace_pid=replace_pid,
        hand_over=hand_over,
    )


def _exporter_run(
    port: int, metrics_port: int, server: str, label: str, replace_pid: int | None, hand_over: bool
) -> ExporterRun:
    config = ExporterConfig(
        profile="k3swap",
        labels={"profile": "k3swap", "build": label},
        bind="127.0.0.1",
        port=metrics_port,
        container="k3swap-none",
        server_url=server,
        proxy_bind="127.0.0.1",
        proxy_port=port,
    )
    return _run(EXPORTER, config, replace_pid, hand_over)


def _front_run(port: int, server: str, label: str, replace_pid: int | None, hand_over: bool) -> FrontRun:
    config = FrontConfig(
        profile="k3swap", bind="127.0.0.1", port=port, server_url=server, api_key_file=f"/nonexistent/{label}"
    )  # only to move the fingerprint
    return _run(FRONT, config, replace_pid, hand_over)


def swap_under_load(
    state_dir: Path, helper: str, hand_over: bool, workers: int = 4, before_s: float = 1.0, after_s: float = 1.0
) -> SwapResult:
    """Start `helper` ("exporter" or "front") in front of a TokenServer, run `workers` closed-loop clients through its
    public port, replace it (a new fingerprint; `hand_over` as the planner would set it), and count."""
    ports = real_ports(state_dir)
    public, metrics_port = free_port(), free_port()
    key = exporter_key("k3swap") if helper == "exporter" else front_key("k3swap")
    with TokenServer(free_port()) as upstream:
        server = f"http://127.0.0.1:{upstream.port}"

        def run(label: str, replace_pid: int | None) -> None:
            if helper == "exporter":
                run_exporter(
                    _exporter_run(public, metrics_port, server, label, replace_pid, hand_over), ports, NullReporter()
                )
            else:
                run_front(_front_run(public, server, label, replace_pid, hand_over), ports, NullReporter())

        run("one", None)
        old = int(ports.state.read(key)["pid"])  # type: ignore[index]
        try:
            with ClosedLoop(f"http://127.0.0.1:{public}", workers=workers, timeout_s=30) as clients:
                time.sleep(before_s)
                started = time.monotonic()
                run("two", old)
                ended = time.monotonic()
                time.sleep(after_s)
        finally:
            new = int((ports.state.read(key) or {}).get("pid") or 0)
            record = ports.state.read(key) or {}
            serving = str(record.get("fingerprint", ""))
            old_gone = ports.processes.cmdline(old) is None  # type: ignore[union-attr]
            for pid in {old, new} - {0}:
                ports.processes.terminate(pid, 10.0)  # type: ignore[union-attr]
    outcomes = clients.outcomes
    return SwapResult(
        requests=len(outcomes),
        refused=sum("ConnectError" in o.error for o in outcomes),
        failed=sum(not o.complete for o in outcomes),
        swap_s=ended - started,
        overlapping=len(clients.between(started, ended)),
        old_gone=old_gone,
        serving=serving,
        errors=tuple(
            f"{o.started - started:+.2f}..{o.ended - started:+.2f} s after the swap began: {o.status} {o.error}"[:200]
            for o in outcomes
            if not o.complete
        ),
    )
