"""The latency proxy (metrics.proxy) on aiohttp: every request to serve.port goes to llama-server on
loopback unchanged (method, path, query, headers with Authorization, body; status, headers and body
back, SSE chunk by chunk as they arrive); exporter/proxy_observe.py watches the bytes go by. `send` and `pass_back`
are kimik3's router's too (adapters/slot_router.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import aiohttp
from aiohttp import web

from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics

# Hop-by-hop headers (RFC 9110 7.6.1) are the connection's own, not the message's: never forwarded.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


SESSION = web.AppKey("session", aiohttp.ClientSession)


class Admission(Protocol):
    """The front's gate (adapters/front_proxy.py): `admit()` returns a refusal to send instead, or None once the
    request may go upstream (then `in_flight` counts it until it ends)."""

    in_flight: int

    @property
    def holding(self) -> bool: ...

    async def admit(self) -> web.StreamResponse | None: ...


class Watcher(Protocol):
    """What looks at a reply as it passes (exporter/proxy_observe.RequestTrace; routing/replies.ReplyReader):
    `response` with its status, `chunk` per piece after it went to the client, `finish` once it ended."""

    streaming: bool

    def response(self, status: int, content_type: str) -> None: ...

    def chunk(self, data: bytes) -> None: ...

    def finish(self, upstream_failed: bool = False, client_gone: bool = False) -> None: ...


def client_session(connect_s: float = 10.0, **connector: object) -> aiohttp.ClientSession:
    """The session a proxy sends requests upstream with. No total timeout: a long generation streams for minutes;
    connect fails fast. No decompression: bytes pass as the server sent them. Enough connections for every slot and
    then some; `connect_s`: how long a connection may take to open; `connector`: the connector's other settings, replacing these (kimik3's router: force_close, its
    limit per replica)."""
    # keepalive_timeout is refused with force_close (a connection per request keeps none alive).
    settings = {"limit": 256, **(connector if connector else {"keepalive_timeout": 30})}
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_s),
        auto_decompress=False,
        connector=aiohttp.TCPConnector(**settings),  # type: ignore[arg-type]
    )


def forwarded_headers(request: web.Request) -> dict[str, str]:
    """The request's headers as they go upstream (Authorization with them), less the connection's own."""
    return {k: v for k, v in request.headers.items() if k.lower() not in _HOP}


async def send(
    session: aiohttp.ClientSession, request: web.Request, upstream: str, body: bytes, retry: bool = True
) -> aiohttp.ClientResponse:
    """`request` (its method, path, query, headers and `body`) sent to `upstream` (http://HOST:PORT); its reply once
    the status and headers arrived."""
    for attempt in (1, 2):
        try:
            return await session.request(
                request.method,
                upstream + request.path_qs,
                headers=forwarded_headers(request),
                data=body or None,
                allow_redirects=False,
            )
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            # A pooled keep-alive connection the server had just closed (cpp-httplib closes after a number of
            # requests): nothing was answered, so the request is sent once more on a new one.
            if attempt == 2 or not retry:
                raise
    raise AssertionError("unreachable")


def bad_gateway(exc: BaseException) -> web.Response:
    return web.Response(status=502, text=f"kimik3 proxy: the server did not answer ({type(exc).__name__}: {exc})")


async def pass_back(
    request: web.Request, upstream_reply: aiohttp.ClientResponse, watcher: Watcher
) -> web.StreamResponse:
    """The upstream reply to the client as it arrives (status, headers, body chunk by chunk), `watcher` fed each
    piece after it went out; a 502 when the server failed before the status went out."""
    reply: web.StreamResponse | None = None
    try:
        async with upstream_reply:
            watcher.response(upstream_reply.status, upstream_reply.headers.get("Content-Type", ""))
            reply = web.StreamResponse(status=upstream_reply.status, reason=upstream_reply.reason)
            for key, value in upstream_reply.headers.items():
                if key.lower() not in _HOP:
                    reply.headers.add(key, value)
            if upstream_reply.headers.get("Content-Length") is not None and not watcher.streaming:
                reply.content_length = int(upstream_reply.headers["Content-Length"])
            await reply.prepare(request)
            async for chunk in upstream_reply.content.iter_any():
                # Forwarded first, looked at after: the client's token never waits for the proxy's parsing.
                try:
                    await reply.write(chunk)
                except (aiohttp.ClientConnectionResetError, ConnectionError):
                    watcher.chunk(chunk)
                    watcher.finish(client_gone=True)  # the client left: stop reading the server's reply
                    return reply
                watcher.chunk(chunk)
            try:
                await reply.write_eof()
            except (aiohttp.ClientConnectionResetError, ConnectionError):
                watcher.finish(client_gone=True)
                return reply
    except (aiohttp.ClientError, ConnectionError) as exc:
        watcher.finish(upstream_failed=True)
        if reply is not None and reply.prepared:
            raise  # the status went out already: drop the connection, as the server would
        return bad_gateway(exc)
    watcher.finish()
    return reply


def proxy_app(
    upstream: str,
    metrics: ProxyMetrics,
    gate: Admission | None = None,
    routes: Callable[[web.Application], None] | None = None,
) -> web.Application:
    async def open_session(app: web.Application) -> None:
        app[SESSION] = client_session()

    async def close_session(app: web.Application) -> None:
        await app[SESSION].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        if gate is None:  # the exporter's proxy: nothing is ever held
            return await relay(request)
        if gate.holding:  # only during a replacement: otherwise one attribute test and a counter
            refused = await gate.admit()
            if refused is not None:
                return refused
        gate.in_flight += 1
        try:
            return await relay(request)
        finally:
            gate.in_flight -= 1

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        trace = metrics.start(request.path, body)  # the clock only: the body's model is read after it went out
        try:
            upstream_reply = await send(request.app[SESSION], request, upstream, body)
        except (aiohttp.ClientError, ConnectionError) as exc:
            trace.finish(upstream_failed=True)
            return bad_gateway(exc)
        return await pass_back(request, upstream_reply, trace)

    app = web.Application(client_max_size=1 << 30)  # images in vision requests are large
    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    if routes is not None:
        routes(app)  # the front's control paths, matched before the catch-all below
    app.router.add_route("*", "/{tail:.*}", forward)
    return app
