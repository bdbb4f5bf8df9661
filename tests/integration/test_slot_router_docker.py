"""kimik3's router (router.policy: slots) on real parts: three llama-server replicas (tests/support/llama_replicas.py:
the demo's image, the tiny GGUF, loopback), smg behind it as `fleet apply` starts it (round robin, kimik3's health
settings), and the router started as `fleet apply` starts it (`kimik3 fleet route`, detached, cli/fleet_router.py).

- a conversation's second turn reaches the replica that served its first, and that server says it reused most of
  the prompt (its own `timings.cache_n`);
- a replica removed from smg (the rollout's `router: out`) gets no new request;
- a streamed and a non-streamed reply pass as the server wrote them (SSE events to `[DONE]`; the JSON body);
- a replica killed under the router: the requests that would have gone there go to another (its connection refused
  before any byte came back), none fails."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest
from support.llama_replicas import MODEL_NAME, Replicas, free_port
from support.replica_rig import demo_replicas, smg_over

from kimik3_reconciler.adapters.router_smg import SmgRouter, stop_pid
from kimik3_reconciler.adapters.slot_router import CONTROL_PREFIX
from kimik3_reconciler.cli.fleet_router import start_proxy
from kimik3_reconciler.fleet.router_layout import SMG_BEHIND, RouterLayout

pytestmark = [pytest.mark.docker, pytest.mark.fleet_rollout]  # the fleet extra (smg): CI's fleet stage

SYSTEM = "You are an agent with tools. " + "Tool schema: read(path), write(path, text), run(cmd). " * 12


@dataclass
class Rig:
    replicas: Replicas
    url: str  # kimik3's router
    smg: SmgRouter


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    work = tmp_path_factory.mktemp("slot-router")
    port, smg_port, metrics_port = free_port(), free_port(), free_port()
    base = "http://127.0.0.1"
    layout = RouterLayout(
        "slots", "127.0.0.1", f"{base}:{port}", f"{base}:{smg_port}", f"{base}:{metrics_port}", SMG_BEHIND, True
    )
    with ExitStack() as stack:
        replicas = stack.enter_context(demo_replicas(tmp_path_factory, "k3sr", 19442))
        smg = stack.enter_context(smg_over(replicas, SMG_BEHIND, work / "smg.log", smg_port, metrics_port))
        stack.callback(stop_pid, start_proxy(layout, work / "route.log"))
        yield Rig(replicas, layout.url, smg)


def sent(rig: Rig) -> dict[str, float]:
    """Requests the router sent to each replica (its own counter)."""
    text = httpx.get(f"{rig.url}{CONTROL_PREFIX}/metrics", timeout=10).text
    out = dict.fromkeys(rig.replicas.urls, 0.0)
    for line in text.splitlines():
        if line.startswith('kimik3_router_requests_total{replica="'):
            out[line.split('"', 2)[1]] = float(line.rsplit(" ", 1)[1])
    return out


def chat(url: str, messages: list[dict], **extra: object) -> httpx.Response:
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 4, "temperature": 0, **extra}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer


def turn(rig: Rig, messages: list[dict]) -> tuple[str, dict]:
    """One request through the router: the replica it went to (the router's counter moved there) and the reply."""
    before = sent(rig)
    reply = chat(rig.url, messages).json()
    after = sent(rig)
    moved = [u for u in after if after[u] != before.get(u, 0.0)]
    assert len(moved) == 1, (before, after)
    return moved[0], reply


def conversation(name: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"task {name}: " + "detail " * 30}]


def test_a_second_turn_reaches_the_replica_that_served_the_first_and_hits_its_cache(rig: Rig) -> None:
    for name in ("a", "b", "c", "d"):
        messages = conversation(name)
        first, reply = turn(rig, messages)
        messages += [reply["choices"][0]["message"], {"role": "user", "content": "and then? " + "more " * 20}]
        second, reply = turn(rig, messages)
        assert second == first
        timings = reply["timings"]
        assert timings["cache_n"] >= 0.8 * (timings["cache_n"] + timings["prompt_n"]), timings


def test_a_replica_removed_from_smg_gets_no_new_request(rig: Rig) -> None:
    out, _ = turn(rig, conversation("probe"))  # where new conversations of this agent go now
    worker = rig.smg.find(out)
    assert worker is not None
    rig.smg.remove(worker.id)
    try:
        rig.smg.wait_gone(worker.id, 30)
        before = sent(rig)
        for i in range(6):
            turn(rig, conversation(f"removed {i}"))
        after = sent(rig)
        assert after[out] == before[out]
        assert sum(after.values()) - sum(before.values()) == 6
    finally:
        rig.smg.add(out)
        rig.smg.wait_in_rotation(out, timeout_s=60)


def test_streamed_and_whole_replies_pass_as_the_server_wrote_them(rig: Rig) -> None:
    whole = chat(rig.url, conversation("whole"))
    assert whole.headers["content-type"].startswith("application/json")
    body = whole.json()
    assert body["object"] == "chat.completion" and "timings" in body
    with httpx.stream(
        "POST",
        f"{rig.url}/v1/chat/completions",
        json={"model": MODEL_NAME, "messages": conversation("streamed"), "max_tokens": 4, "stream": True},
        timeout=120,
    ) as streamed:
        assert streamed.status_code == 200
        assert streamed.headers["content-type"].startswith("text/event-stream")
        text = b"".join(streamed.iter_raw()).decode()
    events = [line[5:].strip() for line in text.split("\n") if line.startswith("data:")]
    assert events[-1] == "[DONE]"
    assert all(json.loads(e)["object"] == "chat.completion.chunk" for e in events[:-1])
    assert any("timings" in json.loads(e) for e in events[:-1])
    models = httpx.get(f"{rig.url}/v1/models", timeout=10)  # another path: through smg
    assert models.status_code == 200 and MODEL_NAME in models.text


def test_a_killed_replicas_requests_go_to_another(rig: Rig) -> None:
    served = []
    for i in range(3):
        messages = conversation(f"kill {i}")
        url, reply = turn(rig, messages)
        served.append((url, [*messages, reply["choices"][0]["message"], {"role": "user", "content": "next"}]))
    victim = served[0][0]  # the replica holding the first conversation (sequential: the others' too)
    held = [messages for url, messages in served if url == victim]
    index = rig.replicas.urls.index(victim)
    subprocess.run(["docker", "kill", rig.replicas.names[index]], check=True, capture_output=True)
    try:
        before = sent(rig)
        for messages in held:  # at once: smg's health checks take seconds to see it gone
            chat(rig.url, messages)
        after = sent(rig)
        assert after[victim] == before[victim]
    finally:
        rig.replicas.restart(index)
