"""`fleet apply`'s `router: out` step on real parts: smg (the `fleet` extra) in front of the demo's llama-server
(a container on this machine's dockerd, loopback), long replies running on the server when the step starts (three or more,
as many as fill ~15 s here; two slots: the others wait, as a busy server's requests do).

smg 1.13 drops a removed worker after a fixed drain (5 s), whether or not the requests it sent there ended; a
rollout that stopped the server then cut a reply still running (the one failed request of run A in
docs/operations.md). The step must return only once the server itself runs and queues nothing, also across the
instant when the first two replies end and the queued one is between llama-server's queues (both gauges read 0:
the step's first version went on there, 34 s before the third reply ended)."""

from __future__ import annotations

import math
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from support.realparts import KIMIK3, converged_demo
from support.registry import free_port

from kimik3_reconciler.adapters.router_smg import SmgRouter, start_smg, stop_smg
from kimik3_reconciler.cli.fleet_apply import server_in_flight

pytestmark = [pytest.mark.docker, pytest.mark.fleet_rollout]  # the fleet extra (smg): CI's fleet stage

NAME, PORT = "k3fd-serve", 19381
SERIES = ("llamacpp:requests_processing", "llamacpp:requests_deferred")
# The demo serves 2 slots: replies past two wait for one (llamacpp:requests_deferred); an odd count leaves one running
# alone at the end. At least 3; more where one reply ends quickly (a reply cannot outgrow its slot's context).
REPLIES_AT_LEAST = 3


def _chat(server: str, tokens: int) -> httpx.Response:
    """A reply of exactly `tokens` tokens (llama-server's `ignore_eos`: random weights end a reply early at random;
    sent to the server itself, as smg drops that field). Where it came from does not matter to the step: the
    server's own count is what it waits on."""
    body = {"messages": [{"role": "user", "content": "Go on."}], "max_tokens": tokens, "ignore_eos": True}
    return httpx.post(f"{server}/v1/chat/completions", json=body, timeout=600)


def _replies_for(server: str, seconds: float) -> tuple[int, int]:
    """How many replies of how many tokens keep the server busy about `seconds` here: the tokens from the server's own
    rate on a short reply (`timings.predicted_per_second`, without the prompt and queue time that made a wall-clock
    estimate ten times short once), capped where a slot's context ends; then as many replies as that length, timed,
    takes to fill `seconds` (on an idle machine one capped reply took under 2 s: CI's fleet stage
    at 59473b2+, where none outlasted smg's 5 s drain). Machines differ tenfold."""
    _chat(server, 8)  # the first reply after a load is slower
    started = time.monotonic()
    answer = _chat(server, 16)
    assert answer.status_code == 200
    rate = answer.json().get("timings", {}).get("predicted_per_second") or 16 / (time.monotonic() - started)
    tokens = max(16, min(1500, round(rate * seconds)))
    started = time.monotonic()
    assert _chat(server, tokens).status_code == 200
    one = max(0.1, time.monotonic() - started)
    # two slots share the cores: a pair of replies takes about two replies' time, so `seconds` holds about
    # seconds / one replies (odd: the last runs alone)
    return tokens, min(21, max(REPLIES_AT_LEAST, math.ceil(seconds / one) | 1))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with contextmanager(converged_demo)(tmp_path_factory.mktemp("fleet-drain"), NAME, PORT):
        yield f"http://127.0.0.1:{PORT}"


def test_out_returns_only_once_the_server_has_finished_what_the_router_sent_it(server: str, tmp_path: Path) -> None:
    port = free_port()
    running = start_smg("127.0.0.1", port, free_port(), "round_robin", tmp_path / "smg.log")
    router = SmgRouter(running.url, running.metrics_url)
    try:
        router.add(server)
        router.wait_in_rotation(server, 60)
        ended: list[tuple[float, int, bool]] = []
        tokens, replies = _replies_for(server, seconds=15)

        def reply() -> None:
            answer = _chat(server, tokens)
            finish = answer.status_code == 200 and bool(answer.json()["choices"][0].get("finish_reason"))
            ended.append((time.monotonic(), answer.status_code, finish))

        threads = [threading.Thread(target=reply) for _ in range(replies)]
        for thread in threads:
            thread.start()
        in_flight = server_in_flight(server, SERIES)
        deadline = time.monotonic() + 30
        # both slots busy and one reply waiting (the server's gauges lag its queue: not all of them need be seen)
        while (in_flight() or 0) < REPLIES_AT_LEAST:
            assert time.monotonic() < deadline, f"the server never held {REPLIES_AT_LEAST} replies: {in_flight()}"
            time.sleep(0.05)
        gone: list[float] = []  # when smg stopped listing the worker
        worker_id = router.find(server).id
        watcher = threading.Thread(
            target=lambda: router.wait_gone(worker_id, 240) and gone.append(time.monotonic()), daemon=True
        )
        watcher.start()
        started = time.monotonic()
        step = subprocess.run(
            [
                *KIMIK3,
                "fleet",
                "router-step",
                "out",
                "--record",
                str(tmp_path / "rollout.json"),
                "--router",
                running.url,
                "--metrics",
                running.metrics_url,
                "--host",
                "h1",
                "--worker",
                server,
                "--drain-timeout",
                "240",
                "--min-serving",
                "0",
                "--in-flight-series",
                ",".join(SERIES),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        returned = time.monotonic()
        watcher.join(120)
        for thread in threads:
            thread.join(300)
        print(
            f"\nsmg dropped the worker {gone[0] - started if gone else float('nan'):.1f} s after the step started; "
            f"the step returned after {returned - started:.1f} s; the replies ended "
            f"{', '.join(f'{t - started:.1f}' for t, _, _ in ended)} s after it started ({step.stdout.strip()})"
        )
        assert step.returncode == 0, step.stderr[-2000:]
        assert [(status, finish) for _, status, finish in ended] == [(200, True)] * replies
        # The case that broke: smg no longer listed the worker while a reply still ran on the server.
        assert gone and max(t for t, _, _ in ended) > gone[0], "no reply outlasted smg's drain: not the case tested"
        assert returned >= max(t for t, _, _ in ended), "the step returned while the server still ran a reply"
        assert in_flight() == 0 and "its requests ended" in step.stdout
    finally:
        router.close()
        stop_smg(running)
