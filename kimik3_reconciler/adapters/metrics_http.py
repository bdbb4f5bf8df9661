"""The exporter's HTTP side, on aiohttp: /metrics (prometheus_client's exposition of a registry), /healthz
(the exporter's fingerprint: how kimik3 tells its own exporter from whatever holds the port).

aiohttp: one maintained package that is both the server and, for the latency proxy, the streaming
client, on one event loop (docs/metrics.md says why not starlette+uvicorn+httpx); the loop is uvloop's
(libuv): the proxy relays one chunk per token, and asyncio's own loop costs a quarter more CPU per
token (bench/proxy_cpu.py).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import uvloop
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from kimik3_reconciler.adapters.socket_handover import Offer, Taken, take
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


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port), as aiohttp's TCPSite makes it (SO_REUSEADDR; IPv6 only on v6)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


# After a handover the old helper answers what its clients send on connections they already hold with
# `Connection: close` (so they open the next one on the new helper) for up to this long, then closes the rest: an
# idle keep-alive connection closed under a client that is sending on it fails that request.
CLOSE_GRACE_S = 3.0


async def _start(
    sites: list[tuple[web.Application, str, int]], taken: Taken, closing: asyncio.Event
) -> tuple[list[web.AppRunner], dict[tuple[str, int], socket.socket]]:
    runners, listeners = [], {}
    try:
        for app, host, port in sites:

            async def close_after(_: web.Request, response: web.StreamResponse) -> None:
                if closing.is_set():
                    # The header as well: aiohttp decided it before this hook, and a client told keep-alive would
                    # send its next request on a connection this side closes.
                    response.force_close()
                    response.headers["Connection"] = "close"

            app.on_response_prepare.append(close_after)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            sock = taken.pop((host, port)) or _listen(host, port)
            listeners[(host, port)] = sock
            await web.SockSite(runner, sock).start()
    except BaseException:
        taken.keep()  # this start failed: the old helper keeps accepting, as if nothing had been asked
        raise
    taken.done()  # served here: the old helper stops accepting, the sockets not served here close
    return runners, listeners


async def _hand_off(runners: list[web.AppRunner], closing: asyncio.Event) -> None:
    """Handed over: stop accepting (the new helper accepts on the same sockets), tell the clients of the connections
    held here to close them, and wait until they did (at most CLOSE_GRACE_S)."""
    for runner in runners:
        for site in list(runner.sites):
            await site.stop()
    closing.set()
    deadline = asyncio.get_running_loop().time() + CLOSE_GRACE_S
    while (
        any(r.server is not None and r.server.connections for r in runners)
        and asyncio.get_running_loop().time() < deadline
    ):
        await asyncio.sleep(0.05)


async def _serve(sites: list[tuple[web.Application, str, int]], handover: str | None) -> None:
    # The sockets of the helper this one replaces, when it offers them (adapters/socket_handover.py): served here
    # before it stops accepting, so the port never refuses a client. Any other is bound as usual.
    closing = asyncio.Event()
    runners, listeners = await _start(sites, take(handover) if handover else Taken(), closing)
    stop, handed_over = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if handover:
        Offer(handover, listeners, lambda: loop.call_soon_threadsafe(handed_over.set)).start()
    try:
        await asyncio.wait(
            [asyncio.create_task(stop.wait()), asyncio.create_task(handed_over.wait())],
            return_when=asyncio.FIRST_COMPLETED,
        )
        if handed_over.is_set():  # also when a SIGTERM came with it: its clients move over before anything closes
            await _hand_off(runners, closing)
    finally:
        for runner in runners:
            await runner.cleanup()  # the requests in flight finish first (aiohttp's shutdown timeout)


def serve(sites: list[tuple[web.Application, str, int]], handover: str | None = None) -> None:
    """Serve every (app, host, port) until SIGTERM/SIGINT, on uvloop's event loop. `handover`: the name under which
    this helper takes the listening sockets of the one it replaces, and offers its own to the next."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(sites, handover))
