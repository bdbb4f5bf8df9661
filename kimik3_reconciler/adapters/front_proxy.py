"""The front (issue 29, metrics.handover): the latency proxy (adapters/latency_proxy.py) as a process of its own on
serve.port, with a gate an apply closes while it replaces the server behind it.

Open (always, but during a replacement) the gate costs one attribute test and a counter per request. Holding: new
requests wait in the front (at most `queue` of them, each at most `wait_s`; past either a 503 with Retry-After, so a
client backs off instead of hanging), requests already sent upstream finish (the drain: up to `drain_s`, until the
front's own count and the server's /slots say nothing is busy), and a release sends the held ones on to whatever
server answers behind the private port then: the new one, or the reverted one. The control paths (`/.kimik3/front/`
hold, release, healthz, metrics) need the token of the state record and a client on this host; nothing of a
request's body or headers is logged.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from kimik3_reconciler.adapters.latency_proxy import SESSION, proxy_app
from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics
from kimik3_reconciler.model.api_keys import api_keys
from kimik3_reconciler.model.front import CONTROL_PREFIX, TOKEN_HEADER, FrontConfig, HoldOrder

SLOTS_POLL_S = 0.25


class Gate:
    """Open, or holding since a `hold`: what the front does with a request that arrives now."""

    def __init__(self) -> None:
        self.in_flight = 0  # requests sent upstream and not finished (the drain waits for 0)
        self.held = 0  # requests waiting for a release now
        self.refused = {"queue": 0, "wait": 0}  # 503s sent while holding, by cause
        self.released = 0  # held requests sent on by releases, in all
        self.order: HoldOrder | None = None
        self.since = 0.0
        self._open = asyncio.Event()
        self._open.set()
        self._lease: asyncio.TimerHandle | None = None

    @property
    def holding(self) -> bool:
        return not self._open.is_set()

    async def admit(self) -> web.StreamResponse | None:
        if self._open.is_set():
            return None
        order = self.order
        assert order is not None  # closed only by hold(), which sets it
        if self.held >= order.queue:
            # Bounded: a queue that grew without limit would hold memory and sockets for clients that gave up.
            self.refused["queue"] += 1
            return _busy(order, f"the server is being replaced and {order.queue} requests already wait")
        self.held += 1
        try:
            await asyncio.wait_for(self._open.wait(), order.wait_s)
        except TimeoutError:
            self.refused["wait"] += 1
            return _busy(order, f"the server is being replaced; this request waited {order.wait_s:.0f} s")
        finally:
            self.held -= 1
        return None

    def hold(self, order: HoldOrder) -> None:
        if not self.holding:
            self.since = time.monotonic()
        self.order = order
        self._open.clear()
        if self._lease is not None:
            self._lease.cancel()
        # An apply killed between hold and release never releases: the front lets go by itself.
        self._lease = asyncio.get_running_loop().call_later(order.lease_s, self.release)

    def release(self) -> int:
        held = self.held
        if self._lease is not None:
            self._lease.cancel()
            self._lease = None
        if self.holding:
            self.released += held
        self._open.set()
        return held


def _busy(order: HoldOrder, why: str) -> web.Response:
    return web.Response(
        status=503,
        text=f"kimik3: {why}; retry in {order.retry_after_s} s",
        headers={"Retry-After": str(order.retry_after_s)},
    )


def front_app(config: FrontConfig, token: str, registry: CollectorRegistry, metrics: ProxyMetrics) -> web.Application:
    gate = Gate()
    local = {config.bind} | {"127.0.0.1", "::1"}

    def allowed(request: web.Request) -> bool:
        # Control only from this host (the apply runs here) and only with the token of the state record: the port
        # is the public one, reachable by every client of the server.
        remote = request.remote or ""
        try:
            on_host = remote in local or ipaddress.ip_address(remote).is_loopback
        except ValueError:
            on_host = False
        sent = request.headers.get(TOKEN_HEADER, "")
        return on_host and hmac.compare_digest(sent.encode(), token.encode())

    def status() -> dict:
        return {
            "profile": config.profile,
            "fingerprint": config.fingerprint,
            "holding": gate.holding,
            "in_flight": gate.in_flight,
            "held": gate.held,
            "released": gate.released,
            "refused": gate.refused,
        }

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response(status())

    async def hold(request: web.Request) -> web.Response:
        if not allowed(request):
            return web.Response(status=403, text="kimik3 front: control needs the token, from this host")
        order = HoldOrder.from_json(json.loads(await request.read()))
        started = time.monotonic()
        gate.hold(order)
        busy = await _drain(request.app, gate, order.drain_s)
        return web.json_response(
            {**status(), "drained": not busy, "busy": busy, "drain_s": round(time.monotonic() - started, 3)}
        )

    async def release(request: web.Request) -> web.Response:
        if not allowed(request):
            return web.Response(status=403, text="kimik3 front: control needs the token, from this host")
        held_s = time.monotonic() - gate.since if gate.holding else 0.0
        sent_on = gate.release()
        return web.json_response({**status(), "released_now": sent_on, "held_s": round(held_s, 3)})

    async def exposition(_: web.Request) -> web.Response:
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _drain(app: web.Application, gate: Gate, drain_s: float) -> str:
        """Wait until nothing runs on the server (the front's own count, and /slots for clients that reach it
        on loopback), at most `drain_s`; what was still busy then ("" when nothing)."""
        deadline = time.monotonic() + drain_s
        while True:
            busy = (
                f"{gate.in_flight} requests through the front"
                if gate.in_flight
                else await _busy_slots(app[SESSION], config)
            )
            if not busy or time.monotonic() >= deadline:
                return busy
            await asyncio.sleep(min(SLOTS_POLL_S, max(0.0, deadline - time.monotonic())))

    def routes(app: web.Application) -> None:
        app.router.add_get(f"{CONTROL_PREFIX}/healthz", healthz)
        app.router.add_get(f"{CONTROL_PREFIX}/metrics", exposition)
        app.router.add_post(f"{CONTROL_PREFIX}/hold", hold)
        app.router.add_post(f"{CONTROL_PREFIX}/release", release)

    return proxy_app(config.server_url, metrics, gate=gate, routes=routes)


async def _busy_slots(session: aiohttp.ClientSession, config: FrontConfig) -> str:
    """Slots the server says are processing ("" when none, or when it has no /slots to ask: the front's own
    count is then all there is)."""
    headers = {}
    if config.api_key_file:
        try:
            keys = api_keys(Path(config.api_key_file).read_text())
        except (OSError, UnicodeDecodeError):
            keys = ()
        if keys:
            headers["Authorization"] = f"Bearer {keys[0]}"
    try:
        async with session.get(
            f"{config.server_url}/slots", headers=headers, timeout=aiohttp.ClientTimeout(total=2)
        ) as reply:
            if reply.status != 200:
                return ""
            slots = await reply.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return ""  # no server answering: nothing of it can still be busy
    busy = (
        [s.get("id") for s in slots if isinstance(s, dict) and s.get("is_processing")]
        if isinstance(slots, list)
        else []
    )
    return f"slots {busy} processing" if busy else ""
