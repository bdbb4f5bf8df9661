"""The benchmark's hold (bench/router_hold.py, `bench/fleet_cache_rollout.py --out hold`) on real smg (the fleet extra's binary, started as `fleet apply` starts it: kimik3's cache-aware
settings and health checks) in front of three stub OpenAI-compatible workers on loopback. No model: what is tested is
where smg sends each conversation, and every reply names the worker that gave it.

- A worker held out (`hold_out`: its probes fail, smg routes it nothing new) stays listed, its breaker closed; put
  back (`put_back_held`: released), every conversation it served that had no turn meanwhile comes back to it. With
  no reply running on it while held: smg puts a held worker back in rotation when one completes, which is why a
  rollout removes instead (bench/router_hold.py).
- The product's `router: in` (cli/fleet_apply.py `_put_back`) right after a removal, while smg still lists the worker
  `draining`: it is added back once smg drops it."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from support.json_http import JsonHandler
from support.llama_replicas import free_port

from bench.router_hold import held, hold_out, put_back_held
from kimik3_reconciler.adapters.router_smg import SmgRouter, start_smg, stop_smg
from kimik3_reconciler.cli.fleet_apply import _put_back
from kimik3_reconciler.engines import engine_for

pytestmark = pytest.mark.fleet_rollout  # the fleet extra (smg): CI's fleet stage

PREDICTED = engine_for("llamacpp").series.generated_tokens_total  # what `router: in` reads as "sent traffic"
SYSTEMS = [f"You are agent {a}. " + f"tool schema {a}: run_tests(path), read_file(path). " * 40 for a in range(2)]


class StubWorker:
    """An OpenAI-compatible server that answers every chat with its own URL and counts its replies as tokens."""

    def __init__(self) -> None:
        self.replies = 0
        stub = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # http.server calls it by this name
                if self.path == "/health":
                    self.send_json(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self.send_json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
                elif self.path == "/metrics":
                    data = f"{PREDICTED} {stub.replies}\n".encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self.send_json(404, {"error": self.path})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stub.replies += 1
                message = {"role": "assistant", "content": stub.url}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self.send_json(200, {"id": "x", "object": "chat.completion", "model": "stub", "choices": [choice]})

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[SmgRouter, list[str], str]]:
    with ExitStack() as stack:
        workers = [StubWorker() for _ in range(3)]
        for worker in workers:
            stack.callback(worker.close)
        running = start_smg("127.0.0.1", free_port(), free_port(), "cache_aware", tmp_path / "smg.log")
        stack.callback(stop_smg, running)
        router = SmgRouter(running.url, running.metrics_url)
        stack.callback(router.close)
        urls = [w.url for w in workers]
        for url in urls:
            router.add(url)
        for url in urls:
            router.wait_in_rotation(url, timeout_s=60)
        yield router, urls, running.url


class Conversations:
    """Agent sessions sharing two system prompts, each re-sent whole every turn; `turn` says who answered."""

    def __init__(self, router_url: str, count: int) -> None:
        self.url = router_url
        self.messages = [
            [{"role": "system", "content": SYSTEMS[c % 2]}, {"role": "user", "content": f"task {c}: " + "step " * 80}]
            for c in range(count)
        ]

    def turn(self, c: int) -> str:
        answer = httpx.post(
            f"{self.url}/v1/chat/completions", json={"model": "stub", "messages": self.messages[c]}, timeout=30
        )
        assert answer.status_code == 200, answer.text
        self.messages[c] += [
            {"role": "assistant", "content": f"calling a tool ({len(self.messages[c])})"},
            {"role": "user", "content": f"tool result {c}: " + "ok " * 60},
        ]
        return answer.json()["choices"][0]["message"]["content"]

    def homes(self) -> dict[int, str]:
        """Two turns of every conversation: where each one's second went."""
        return {c: [self.turn(c) for _ in range(2)][-1] for c in range(len(self.messages))}


def busiest(homes: dict[int, str]) -> str:
    return Counter(homes.values()).most_common(1)[0][0]


def test_a_held_worker_keeps_its_conversations_and_gets_them_back(fleet) -> None:  # noqa: ANN001
    router, urls, router_url = fleet
    chats = Conversations(router_url, 9)
    homes = chats.homes()
    url = busiest(homes)
    hold_out(router, "busiest", url, 30, 1, lambda: 0)
    out = router.find(url)
    assert out is not None and held(router, url) and not out.in_rotation and out.breaker == "closed", out
    # While it is out, a conversation it served goes on elsewhere (its next turns stay there, with that cache).
    moved = next(c for c, home in homes.items() if home == url)
    assert chats.turn(moved) != url
    assert put_back_held(router, "busiest", url, 1).startswith("in rotation")  # no traffic meanwhile: one client here
    listed = router.find(url)
    assert listed is not None and listed.in_rotation and not held(router, url)
    back = {c: chats.turn(c) for c, home in homes.items() if home == url and c != moved}
    assert back and set(back.values()) == {url}, (url, back)
    assert all(w.breaker == "closed" for w in router.workers()), router.workers()
    assert {w.url for w in router.workers()} == set(urls)


def test_router_in_adds_back_a_host_smg_still_drains(fleet) -> None:  # noqa: ANN001
    """smg lists a removed worker `draining` for a fixed 5 s, then drops it: one left to its health checks then would
    never come back (the step failed after 60 s); `router: in` waits the drain out and adds it."""
    router, urls, _ = fleet
    removed = router.find(urls[0])
    router.remove(removed.id)
    assert router.find(urls[0]).status == "draining"
    assert _put_back(router, "a", urls[0], 1).startswith("in rotation")
    back = router.find(urls[0])
    assert back.in_rotation and back.id != removed.id  # added anew, not the drained entry
