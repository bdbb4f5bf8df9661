"""kimik3's router (adapters/slot_router.py) on real sockets: two scripted llama-server look-alikes and a scripted
smg (its `GET /workers`, the rotation), the router between them and httpx. The bytes a replica writes reach the
client unchanged (streamed in odd pieces, or whole), the Authorization header reaches the replica as sent, a second
turn follows the first where the reply said it was cached, a refused replica's request goes to the next, other
paths go through smg, and the metrics never hold a prompt."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from aiohttp import web
from support.ports import free_port

from kimik3_reconciler.adapters.slot_router import CONTROL_PREFIX, router_app

SECRET_PROMPT = "the user's private text 7f3a"
STREAM = (
    b'data: {"choices":[{"delta":{"content":"Hel"}}],"object":"chat.completion.chunk"}\n\n',
    b'data: {"choices":[{"delta":{"content":"lo"}}],"object":"chat.completion.chunk"}\n\ndata: {"choices":[],',
    b'"timings":{"cache_n":90,"prompt_n":10}}\n\n',
    b"data: [DONE]\n\n",
)
COLD_END = (b'data: {"choices":[],"timings":{"cache_n":0,"prompt_n":100}}\n\n', b"data: [DONE]\n\n")
WHOLE = json.dumps({"object": "chat.completion", "timings": {"cache_n": 0, "prompt_n": 50}}).encode()


class Rig:
    """Replicas, smg and the router on one event loop in a thread."""

    def __init__(self, replicas: int = 2, dead: int = 0, loading: int = 0, unreachable: int = 0) -> None:
        self.ports = [free_port() for _ in range(replicas)]
        # listed, a connection never opened: a listener whose one-place queue is full drops the SYNs (a host down)
        self.silent: list[socket.socket] = []
        for _ in range(unreachable):
            listener = socket.create_server(("127.0.0.1", free_port()), backlog=0)
            self.silent += [listener, socket.create_connection(listener.getsockname())]
        self.dead = [free_port() for _ in range(dead)]  # listed by smg, nothing listening: a refused connection
        self.loading = [free_port() for _ in range(loading)]  # listed, answering 503 (llama-server loading)
        silent = [listener.getsockname()[1] for listener in self.silent[::2]]
        self.urls = [f"http://127.0.0.1:{p}" for p in silent + self.dead + self.loading + self.ports]
        self.smg_port, self.port = free_port(), free_port()
        self.seen: list[tuple[int, str, dict]] = []  # (replica port, path, headers)
        self.smg_paths: list[str] = []
        self.hold: threading.Event | None = None  # set: the replicas answer (until then each request waits there)
        self.garbled = 0  # smg's next answers to GET /workers that are not its worker list (a restarting smg)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runners: list[web.AppRunner] = []
        self.release = threading.Event()  # a "hold" turn's reply ends once this is set

    def replica(self, port: int) -> web.Application:
        async def chat(request: web.Request) -> web.StreamResponse:
            if port in self.loading:
                return web.json_response({"error": {"code": 503, "message": "Loading model"}}, status=503)
            body = await request.json()
            self.seen.append((port, request.path, dict(request.headers)))
            while self.hold is not None and not self.hold.is_set():
                await asyncio.sleep(0.05)
            if not body.get("stream"):
                return web.Response(body=WHOLE, content_type="application/json")
            reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await reply.prepare(request)
            last = body["messages"][-1]["content"]
            await reply.write(STREAM[0])
            while last == "hold" and not self.release.is_set():  # a reply still running while others end
                await asyncio.sleep(0.02)
            for piece in COLD_END if last == "cold" else STREAM[1:]:  # "cold": the server reused nothing
                await reply.write(piece)
            await reply.write_eof()
            return reply

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        return app

    def smg(self) -> web.Application:
        async def workers(_: web.Request) -> web.Response:
            if self.garbled:
                self.garbled -= 1
                return web.Response(text="<html>starting</html>", content_type="text/html")
            listed = [{"id": u, "url": u, "status": "ready", "is_healthy": True} for u in self.urls]
            return web.json_response({"workers": listed})

        async def other(request: web.Request) -> web.Response:
            self.smg_paths.append(request.path)
            return web.json_response({"data": [{"id": "k3"}]})

        app = web.Application()
        app.router.add_get("/workers", workers)
        app.router.add_route("*", "/{tail:.*}", other)
        return app

    async def _start(self) -> None:
        apps = [(self.replica(p), p) for p in self.ports + self.loading]
        apps += [(self.smg(), self.smg_port), (router_app(f"http://127.0.0.1:{self.smg_port}", None), self.port)]
        for app, port in apps:
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self.runners.append(runner)

    async def _stop(self) -> None:
        for runner in reversed(self.runners):
            await runner.cleanup()

    def __enter__(self) -> Rig:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        deadline = time.monotonic() + 10
        while len(self.health()["rotation"]) < len(self.urls):  # the router read smg's list once
            assert time.monotonic() < deadline
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        for held in self.silent:
            held.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self) -> dict:
        return httpx.get(f"{self.url}{CONTROL_PREFIX}/healthz", timeout=5).json()

    def metrics(self) -> str:
        return httpx.get(f"{self.url}{CONTROL_PREFIX}/metrics", timeout=5).text


@pytest.fixture
def rig() -> Iterator[Rig]:
    with Rig() as started:
        yield started


def messages(*turns: str) -> list[dict]:
    return [{"role": "system", "content": "agent"}, *({"role": "user", "content": t} for t in turns)]


def test_a_streamed_reply_reaches_the_client_byte_for_byte(rig: Rig) -> None:
    body = {"messages": messages(SECRET_PROMPT), "stream": True}
    headers = {"Authorization": "Bearer sk-abc"}
    with httpx.stream("POST", f"{rig.url}/v1/chat/completions", json=body, headers=headers, timeout=10) as reply:
        got = b"".join(reply.iter_raw())
        assert reply.headers["content-type"] == "text/event-stream"
    assert got == b"".join(STREAM)
    assert rig.seen[0][2]["Authorization"] == "Bearer sk-abc"


def test_a_whole_reply_passes_unchanged_with_its_length(rig: Rig) -> None:
    reply = httpx.post(f"{rig.url}/v1/chat/completions", json={"messages": messages("q")}, timeout=10)
    assert reply.content == WHOLE
    assert reply.headers["content-length"] == str(len(WHOLE))


def test_the_next_turn_follows_the_replica_that_said_it_reused_the_first(rig: Rig) -> None:
    for name in ("a", "b", "c"):
        first = messages(f"task {name}")
        httpx.post(f"{rig.url}/v1/chat/completions", json={"messages": first, "stream": True}, timeout=10)
        follow = [*first, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "next"}]
        httpx.post(f"{rig.url}/v1/chat/completions", json={"messages": follow, "stream": True}, timeout=10)
        assert rig.seen[-1][0] == rig.seen[-2][0]
    text = rig.metrics()
    assert 'kimik3_router_decisions_total{decision="followed"} 3.0' in text
    assert 'kimik3_router_prompt_tokens_total{kind="cached"' in text
    assert SECRET_PROMPT not in text and "task a" not in text


@pytest.mark.parametrize(
    ("dead", "loading", "unreachable", "kind"),
    [(1, 0, 0, "refused"), (0, 1, 0, "unavailable"), (0, 0, 1, "refused")],
)
def test_a_replica_that_does_not_take_the_request_is_skipped_for_the_next(
    dead: int, loading: int, unreachable: int, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kimik3_reconciler.adapters.slot_router as slot_router

    monkeypatch.setattr(slot_router, "CONNECT_S", 0.5)  # a host down: its connection not open by then
    with Rig(replicas=1, dead=dead, loading=loading, unreachable=unreachable) as rig:
        for i in range(4):  # each its own agent: a new conversation goes to each replica in turn, the dead one too
            body = {"messages": [{"role": "system", "content": f"agent {i}"}, {"role": "user", "content": "q"}]}
            reply = httpx.post(f"{rig.url}/v1/chat/completions", json=body, timeout=10)
            assert reply.status_code == 200
        assert len(rig.seen) == 4
        assert f'kimik3_router_errors_total{{kind="{kind}"}}' in rig.metrics()


def test_other_paths_and_unkeyed_requests_go_through_smg(rig: Rig) -> None:
    assert httpx.get(f"{rig.url}/v1/models", timeout=10).status_code == 200
    httpx.post(f"{rig.url}/v1/chat/completions", content=b"not json", timeout=10)
    assert rig.smg_paths == ["/v1/models", "/v1/chat/completions"]
    assert not rig.seen


def test_a_garbled_worker_list_leaves_the_rotation_followed() -> None:
    """smg answering something other than its worker list (not JSON) must not end the rotation's reads: the last
    rotation stands, and once smg answers again a replica added since is routed to."""
    with Rig(replicas=1) as rig:
        rig.garbled = 3
        time.sleep(1)  # 3 garbled answers read, at ROTATION_POLL_S
        late = rig.urls[0].replace(str(rig.ports[0]), str(free_port()))
        rig.urls.append(late)  # listed from now on (nothing listens: refused, skipped)
        deadline = time.monotonic() + 5
        while late not in rig.health()["rotation"]:
            assert time.monotonic() < deadline, "the rotation is no longer read"
            time.sleep(0.05)
        assert 'kimik3_router_errors_total{kind="rotation"} 3.0' in rig.metrics()


def test_a_large_body_is_keyed_off_the_event_loop(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request of an image's size is parsed and hashed on a worker thread (the other replies' tokens keep flowing
    meanwhile); a usual one on the loop (no thread hop per request)."""
    import kimik3_reconciler.adapters.slot_router as slot_router

    threads: list[threading.Thread] = []
    keyed = slot_router.request_keys

    def keys(path: str, body: bytes) -> list[str] | None:
        threads.append(threading.current_thread())
        return keyed(path, body)

    monkeypatch.setattr(slot_router, "request_keys", keys)
    image = "data:image/png;base64," + "A" * (slot_router.KEYED_ON_LOOP + 1)
    for content in ("q", image):
        body = {"messages": [{"role": "user", "content": content}]}
        assert httpx.post(f"{rig.url}/v1/chat/completions", json=body, timeout=30).status_code == 200
    assert threads[0] is rig.thread and threads[1] is not rig.thread
    assert len(rig.seen) == 2  # both keyed and routed to a replica, not through smg


@pytest.mark.parametrize(("method", "path"), [("POST", "/workers"), ("DELETE", "/workers/x"), ("GET", "/workers")])
def test_smgs_control_api_is_not_reachable_through_the_clients_address(rig: Rig, method: str, path: str) -> None:
    """A client of the router cannot add a worker of its own (to be sent other users' prompts) or take replicas out:
    smg's control API answers on its own port only."""
    reply = httpx.request(method, f"{rig.url}{path}", json={"url": "http://attacker:1"}, timeout=10)
    assert reply.status_code == 403 and f"127.0.0.1:{rig.smg_port}" in reply.text
    assert rig.smg_paths == [] and len(rig.health()["rotation"]) == len(rig.urls)


def test_more_requests_than_one_pool_reach_the_replicas_at_once(rig: Rig) -> None:
    """300 requests in flight over 2 replicas all reach them (the servers queue them, as they would behind smg), none
    held in the router by a connection pool of 256 for the whole fleet."""
    import aiohttp

    rig.hold = threading.Event()
    count = 300

    async def clients() -> list[int]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def one(i: int) -> int:
                body = {"messages": [{"role": "system", "content": f"agent {i}"}, {"role": "user", "content": "q"}]}
                async with session.post(f"{rig.url}/v1/chat/completions", json=body) as reply:
                    await reply.read()
                    return reply.status

            sent = [asyncio.ensure_future(one(i)) for i in range(count)]
            deadline = time.monotonic() + 20
            while len(rig.seen) < count and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            reached = len(rig.seen)
            rig.hold.set()
            statuses = await asyncio.gather(*sent)
            assert reached == count, f"{reached} of {count} reached a replica while the others were running"
            return statuses

    assert asyncio.run(clients()) == [200] * count


def test_a_void_is_counted_once_however_many_replies_run_beside_it() -> None:
    with Rig(replicas=1) as rig:
        url = f"{rig.url}/v1/chat/completions"
        first = {name: messages(f"task {name}") for name in ("x", "y", "z")}
        for convo in first.values():  # each conversation's first turn: held by the one replica
            httpx.post(url, json={"messages": convo, "stream": True}, timeout=10)

        def turn(name: str, last: str) -> list[dict]:
            return [*first[name], {"role": "assistant", "content": "Hello"}, {"role": "user", "content": last}]

        with ExitStack() as running:  # y's and z's next turns stream (their first bytes read) while x's voids
            for name in ("y", "z"):
                body = {"messages": turn(name, "hold"), "stream": True}
                reply = running.enter_context(httpx.stream("POST", url, json=body, timeout=10))
                next(reply.iter_raw())
            httpx.post(url, json={"messages": turn("x", "cold"), "stream": True}, timeout=10)
            rig.release.set()
        assert 'kimik3_router_decisions_total{decision="voided"} 1.0' in rig.metrics()
