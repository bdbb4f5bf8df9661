"""The exporter's HTTP side, on aiohttp: /metrics (prometheus_client's exposition of a registry), /healthz
(the exporter's fingerprint: how kimik3 tells its own exporter from whatever holds the port).

aiohttp: one maintained package that is both the server and, for the latency proxy, the streaming
client, on one event loop (docs/design.md says why not starlette+uvicorn+httpx); the loop is uvloop's
(libuv): the proxy relays one chunk per token, and asyncio's own loop costs a quarter more CPU per
token (bench/proxy_cpu.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import uvloop
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from kimik3_reconciler.model.metrics import ExporterConfig

AppHook = Callable[[list[web.AppRunner]], Awaitable[None]]


def exporter_app(config: ExporterConfig, registry: CollectorRegistry) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        # collect() does blocking reads (docker, /proc, the server): off the event loop, so a proxied
        # stream never waits for a scrape.
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"profile": config.profile, "fingerprint": config.fingerprint})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def _serve(sites: list[tuple[web.Application, str, int]]) -> None:
    runners = []
    for app, host, port in sites:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, reuse_address=True).start()
        runners.append(runner)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def serve(sites: list[tuple[web.Application, str, int]]) -> None:
    """Serve every (app, host, port) until SIGTERM/SIGINT, on uvloop's event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(sites))
