"""kimik3's router (the fleet file's `router.policy: slots`, issue 40): an HTTP proxy on the fleet's client-facing
router address that sends each chat or completion request straight to the replica the `slots` policy picks
(routing/slot_route.py: where the servers said they hold the conversation), bytes unchanged, streamed or not, and
feeds the policy what the reply says the server reused (routing/replies.py).

smg still runs behind it, on an internal port: the rotation (which replicas may take new requests: smg's health
checks, breakers and the rollout's `router: out`/`router: in`) is smg's worker list, read every ROTATION_POLL_S;
every other path (/v1/models, /health, ...) and any request the policy cannot key goes through smg, except smg's
control API (SMG_CONTROL: refused here, served on smg's own port, on loopback). An smg that comes back from an outage
with no worker (restarted by its supervisor, adapters/router_keep.py: smg keeps its workers in memory only) is given
back the workers it listed before (`Rotation.restore`); an outage is a restart only where smg's port refused a
connection (a read that timed out is a busy smg, whose empty list is the rollout's `router: out`).

A new connection per request to a replica (force_close): llama-server closes a kept-alive connection after a
streamed reply (b11434, seen by bench/fleet_cache.py) and the next request on it failed. A request a replica did
not take (its connection refused, or a 502/503/504 status: llama-server loading its model) is sent to the next
replica in rotation; once a reply's status went to the client, a failure is the client's (as behind smg).

Metrics at /.kimik3/router/metrics (prometheus_client): requests sent per replica, the policy's decisions, prompt
tokens reused and evaluated per replica (the servers' own word), proxy errors. Never a body, prompt or header.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from kimik3_reconciler.adapters.latency_proxy import SESSION, bad_gateway, client_session, pass_back, send
from kimik3_reconciler.adapters.router_smg import RouterError, SmgRouter
from kimik3_reconciler.routing.replies import ReplyReader, request_keys
from kimik3_reconciler.routing.slot_route import SlotRoute

ROTATION_POLL_S = 0.2  # how often smg's worker list is read (a removed replica gets no new request after this)
UNAVAILABLE = frozenset({502, 503, 504})  # a replica's answer that it did not run the request: tried on the next
CONNECT_S = 10.0  # a replica's connection not open by then: its host down or cut off (tried on the next replica)
PER_REPLICA = 256  # connections open to one replica at once (requests past it wait in the router for one to end)
KEYED_ON_LOOP = 256 << 10  # a body up to this size is keyed on the event loop (about a millisecond); larger: a thread
# smg adds a worker in the background (after its first health check): for this long after a restore, or until smg
# has one in rotation again, an empty list does not replace the workers to restore (a second restart meanwhile still
# gets them back). Not after: a `router: out` of the last worker then is the rollout's, its rotation empty at once.
RESTORE_GRACE_S = 30.0
CONTROL_PREFIX = "/.kimik3/router"  # the router's own paths (never a client's: the front's convention)
# smg's control API (its worker list, caches, WASM modules, profiler): served on smg's own port (P + 2), never through
# the clients' address: a client of the router could otherwise add a worker of its own (and be sent other users'
# prompts with their API keys) or take the replicas out of rotation. Read-only paths (/get_loads, /health) pass.
SMG_CONTROL = (
    "/workers",
    "/add_worker",
    "/remove_worker",
    "/list_workers",
    "/flush_cache",
    "/wasm",
    "/start_profile",
    "/stop_profile",
)
log = logging.getLogger(__name__)


async def _keys(request: web.Request, body: bytes) -> list[str] | None:
    """The request's conversation prefixes (routing/replies.request_keys); a body over KEYED_ON_LOOP is parsed and
    hashed on a worker thread: on the event loop, a long conversation or an image's base64 (json.loads, json.dumps
    and sha256: 84 ms for 20 MiB here) would hold every other reply's tokens back meanwhile."""
    if request.method != "POST":
        return None
    if len(body) <= KEYED_ON_LOOP:
        return request_keys(request.path, body)
    return await asyncio.to_thread(request_keys, request.path, body)


class RouterMetrics:
    """The router's series (prefix kimik3_router_)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "kimik3_router_requests",
            "requests sent to each replica by the slots policy",
            ["replica"],
            registry=registry,
        )
        self.decisions = Counter(
            "kimik3_router_decisions",
            "the policy's decisions: followed (to the replica holding the conversation), new, displaced (its replica "
            "too busy or out of rotation), voided (a reply that said the replica held nothing it was thought to)",
            ["decision"],
            registry=registry,
        )
        self.prompt = Counter(
            "kimik3_router_prompt_tokens",
            "prompt tokens of the replies, as each server reports them: cached (reused) or evaluated",
            ["replica", "kind"],
            registry=registry,
        )
        self.errors = Counter(
            "kimik3_router_errors",
            "proxy errors: refused (a replica refused the connection, or did not open it in time; sent to the next), unavailable (a replica "
            "answered 502/503/504, loading or stopping; sent to the next), upstream (a replica failed after it was "
            "sent the request), no_replica (every replica in rotation refused), rotation (smg unread)",
            ["kind"],
            registry=registry,
        )
        self.rotation = Gauge("kimik3_router_rotation", "replicas in rotation (smg's worker list)", registry=registry)
        self.restored = Counter(
            "kimik3_router_smg_restored",
            "workers registered with smg again after it came back from an outage with none (restarted)",
            registry=registry,
        )
        self.through_smg = Counter(
            "kimik3_router_through_smg", "requests sent through smg (other paths, unkeyed bodies)", registry=registry
        )


class Rotation:
    """smg's workers in rotation, read every ROTATION_POLL_S (its control API, off the event loop)."""

    def __init__(self, smg: SmgRouter, metrics: RouterMetrics) -> None:
        self.smg, self.metrics = smg, metrics
        self.urls: list[str] = []
        self.listed: list[str] = []  # every worker smg listed at the last read, in rotation or not
        self.unread = False  # the last read failed (logged once until one succeeds)
        # smg refused a connection since the last read that succeeded: nothing listened on its port, so it exited
        # (and its supervisor started it again). Only then is an empty list smg's lost memory, not the rollout's
        # `router: out` of its last worker while a read failed otherwise (a timeout of a busy smg).
        self.down = False
        self.restored_at = -RESTORE_GRACE_S  # when `restore` last ran (time.monotonic())

    def restore(self) -> int:
        """Register again the workers smg listed before its outage; how many it took. Only after an outage: a list
        that empties while smg answers is the rollout's doing (`router: out`) and stays empty."""
        taken = 0
        for url in self.listed:
            try:
                self.smg.add(url)
                taken += 1
            except RouterError as exc:  # its server down meanwhile, or being added already: the others still go in
                log.warning("smg: %s not registered again: %s", url, exc)
        return taken

    async def follow(self) -> None:
        while True:
            try:
                workers = await asyncio.to_thread(self.smg.workers)
                if self.down and not workers and self.listed:
                    taken = await asyncio.to_thread(self.restore)
                    self.restored_at = time.monotonic()
                    self.metrics.restored.inc(taken)
                    log.warning("smg came back with no worker: %d of %d registered again", taken, len(self.listed))
                urls = [w.url for w in workers if w.in_rotation]
            except Exception as exc:  # noqa: BLE001 - RouterError, and what smg.workers() does not translate
                # smg unread (restarting, busy) or its answer not the worker list (not JSON, a field missing, a
                # metrics line of another shape: a restarting smg or another process on its port): the last
                # rotation stands and the next read tries again. Anything escaping here would end this task, and
                # with it every later read: the rotation frozen for the router's life. A replica gone meanwhile refuses its connections and its
                # requests go to the next one.
                if not self.unread:  # once per outage, not every ROTATION_POLL_S
                    log.warning("smg's worker list unread (the last rotation stands): %s", type(exc).__name__)
                self.unread = True
                self.down = self.down or refused(exc)
                self.metrics.errors.labels(kind="rotation").inc()
            else:
                self.unread = self.down = False
                if urls:  # smg has a worker in rotation again: the restore landed, its list is the truth again
                    self.restored_at = -RESTORE_GRACE_S
                restoring = time.monotonic() - self.restored_at <= RESTORE_GRACE_S
                # While smg adds back what was restored (its health checks first), the last rotation stands: the
                # replicas did not go anywhere, only smg's memory of them.
                if urls or not restoring:
                    self.urls = urls
                if workers or not restoring:
                    self.listed = [w.url for w in workers]
                self.metrics.rotation.set(len(self.urls))
            await asyncio.sleep(ROTATION_POLL_S)


def refused(exc: BaseException) -> bool:
    """`exc` (SmgRouter's RouterError, raised from httpx's) is a connection smg's port refused: nothing listened."""
    import httpx

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, httpx.ConnectError):
            return True
        seen = seen.__cause__
    return False


ROTATION = web.AppKey("rotation", Rotation)
FOLLOW = web.AppKey("follow", asyncio.Task)


def router_app(smg_url: str, smg_metrics_url: str | None, policy: SlotRoute | None = None) -> web.Application:
    """The proxy: chat and completion requests by the policy, the rest through smg at `smg_url`."""
    registry = CollectorRegistry()
    metrics = RouterMetrics(registry)
    route = policy or SlotRoute()
    smg = smg_url.rstrip("/")

    async def start(app: web.Application) -> None:
        # The exporter's proxy's 256 connections per server, per replica here: one pool of 256 for the whole fleet
        # would hold its 257th request in the router, unsent and unseen by the servers' queues, while the policy
        # counts it as running on its replica.
        app[SESSION] = client_session(CONNECT_S, force_close=True, limit=0, limit_per_host=PER_REPLICA)
        rotation = Rotation(SmgRouter(smg, smg_metrics_url, timeout_s=2), metrics)
        app[ROTATION] = rotation
        app[FOLLOW] = asyncio.get_running_loop().create_task(rotation.follow())

    async def stop(app: web.Application) -> None:
        app[FOLLOW].cancel()
        await app[SESSION].close()
        app[ROTATION].smg.close()

    async def through_smg(request: web.Request, body: bytes) -> web.StreamResponse:
        metrics.through_smg.inc()
        try:
            upstream = await send(request.app[SESSION], request, smg, body)
        except (aiohttp.ClientError, ConnectionError) as exc:
            metrics.errors.labels(kind="upstream").inc()
            return bad_gateway(exc)
        return await pass_back(request, upstream, ReplyReader())

    async def forward(request: web.Request) -> web.StreamResponse:
        if any(request.path == p or request.path.startswith(f"{p}/") for p in SMG_CONTROL):
            return web.Response(status=403, text=f"kimik3 router: smg's control API is on {smg}, not here")
        body = await request.read()
        keys = await _keys(request, body)
        rotation = request.app[ROTATION].urls
        if keys is None or not rotation:  # not keyed, or nothing in rotation: smg answers as it would alone
            return await through_smg(request, body)
        refused: set[str] = set()
        while True:
            candidates = [u for u in rotation if u not in refused]
            if not candidates:
                metrics.errors.labels(kind="no_replica").inc()
                return web.Response(status=503, text="kimik3 router: every replica in rotation refused the request")
            ticket = route.pick(keys, candidates)
            try:
                upstream = await send(request.app[SESSION], request, ticket.url, body, retry=False)
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, ConnectionRefusedError):
                # Refused (a server killed or stopping), or no connection within CONNECT_S (its host down or cut off:
                # its SYNs unanswered, seconds before smg's health checks take it out): the request never reached
                # it, so nothing ran, and the next one takes it.
                route.answered(ticket, keys, None, None)
                metrics.errors.labels(kind="refused").inc()
                refused.add(ticket.url)
                continue
            except BaseException as exc:
                # Any other failure, the client's going away (cancelled) included: the ticket is settled, so the
                # policy's count of what runs there does not drift.
                route.answered(ticket, keys, None, None)
                if not isinstance(exc, aiohttp.ClientError | ConnectionError):
                    raise
                metrics.errors.labels(kind="upstream").inc()
                return bad_gateway(exc)
            if upstream.status in UNAVAILABLE and len(candidates) > 1:
                # The server said it did not take the request (llama-server answers 503 while it loads the model,
                # seconds before smg's health checks take it out of rotation): nothing ran, the next one takes it,
                # as smg's own retries would.
                upstream.release()
                route.answered(ticket, keys, None, None)
                metrics.errors.labels(kind="unavailable").inc()
                refused.add(ticket.url)
                continue
            break
        metrics.requests.labels(replica=ticket.url).inc()
        metrics.decisions.labels(decision=ticket.decision).inc()
        reader = ReplyReader()
        try:
            return await pass_back(request, upstream, reader)
        finally:  # the reply ended, failed or was cancelled: settled once, with what the server said it reused
            counts = reader.counts
            # Counted from this reply's own answer: `route.voids` also moves under the other requests in flight
            # (read as before and after this reply, a void was counted again by every reply that ran beside it).
            voided = route.answered(ticket, keys, *(counts or (None, None)))
            if reader.failed:
                metrics.errors.labels(kind="upstream").inc()
            if counts is not None:
                metrics.prompt.labels(replica=ticket.url, kind="cached").inc(counts[0])
                metrics.prompt.labels(replica=ticket.url, kind="evaluated").inc(counts[1])
            if voided:
                metrics.decisions.labels(decision="voided").inc()

    async def exposition(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response(
            {"router": "kimik3", "policy": "slots", "smg": smg, "rotation": request.app[ROTATION].urls}
        )

    app = web.Application(client_max_size=1 << 30)  # images in vision requests are large
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get(f"{CONTROL_PREFIX}/metrics", exposition)
    app.router.add_get(f"{CONTROL_PREFIX}/healthz", healthz)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def serve(host: str, port: int, smg_url: str, smg_metrics_url: str | None) -> None:
    """Run the router until SIGTERM/SIGINT (aiohttp's own handling: in-flight replies end first, up to its grace)."""
    import uvloop

    web.run_app(
        router_app(smg_url, smg_metrics_url),
        host=host,
        port=port,
        print=None,
        access_log=None,
        handle_signals=True,
        loop=uvloop.new_event_loop(),  # libuv: a quarter less CPU per relayed token (adapters/metrics_http.py)
    )
