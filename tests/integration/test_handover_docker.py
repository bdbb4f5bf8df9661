"""Issue 29 against the real parts (dockerd, the demo's CPU image, the fixture hub, the real `kimik3`): the demo
with `metrics.handover`, so kimik3's front owns serve.port and llama-server listens on loopback behind it. A client
keeps a steady closed-loop load (streaming and not) through the front while `apply` replaces the server (a knob:
ubatch) and while a failing candidate (a quant that cannot load) is reverted: no request fails, every reply is
complete, and the held requests' added latency is printed. Then the front is killed mid-hold: the held client sees
its connection end (not hang), new clients are refused, and the next apply starts the front again."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.closed_loop import ClosedLoop
from support.demo_work import truncated_hub
from support.realparts import applied, demo_profile, docker, kimik3, write_profile

from kimik3_demo.hub import FixtureHub
from kimik3_reconciler.adapters.front_control import FrontControl
from kimik3_reconciler.model.front import FrontConfig, HoldOrder

pytestmark = pytest.mark.docker

NAME = "k3ho-proxy29"  # the branch in the name: no other test's container
PORT, METRICS_PORT, SERVER_PORT = 19290, 19291, 19292


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureHub]:
    """The demo repo plus UD-TRUNC: one shard cut to a third, which downloads and verifies but cannot load."""
    with truncated_hub(tmp_path_factory.mktemp("handover-hub")) as running:
        yield running


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[tuple[Path, dict]]:
    work = tmp_path_factory.mktemp("kimik3-handover")
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["metrics"] = {
        "port": METRICS_PORT,
        "proxy": True,
        "server_port": SERVER_PORT,
        "handover": {"drain_s": 30, "queue": 64, "wait_s": 600},
    }
    write_profile(work, profile)
    with applied(work, NAME):
        yield work, profile


def front_record(work: Path) -> dict:
    return json.loads((work / "state" / "front" / NAME / "process.json").read_text())


def applied_under_load(work: Path, profile: dict) -> tuple[subprocess.CompletedProcess[str], ClosedLoop, float, float]:
    write_profile(work, profile)
    with ClosedLoop(f"http://127.0.0.1:{PORT}", workers=4) as load:
        load.wait_for(8)  # steady before the change
        started = time.monotonic()
        result = kimik3(work, "apply", "profile.yaml", check=False)
        ended = time.monotonic()
        count = load.done()
        load.wait_for(count + 8)  # and steady after it
    return result, load, started, ended


def report(what: str, load: ClosedLoop, started: float, ended: float) -> None:
    before = [o.seconds for o in load.outcomes if o.ended < started]
    during = load.between(started, ended)
    baseline = statistics.median(before)
    added = sorted(o.seconds - baseline for o in during)
    print(
        f"\n{what}: {len(load.outcomes)} requests, {len(load.failed())} failed; apply {ended - started:.1f} s; "
        f"{len(during)} requests overlapped it; baseline median {baseline * 1000:.0f} ms; added latency of "
        f"those: median {statistics.median(added):.2f} s, max {added[-1]:.2f} s"
    )


def test_the_front_owns_serve_port_and_the_server_is_behind_it(deployed: tuple[Path, dict]) -> None:
    work, _ = deployed
    record = front_record(work)
    cmdline = Path(f"/proc/{record['pid']}/cmdline").read_bytes().split(b"\0")
    assert b"front-serve" in cmdline and NAME.encode() in cmdline
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    assert argv[argv.index("--port") + 1] == str(SERVER_PORT) and argv[argv.index("--host") + 1] == "127.0.0.1"
    # The token is a state record: never in the front's argv nor in its config record.
    token = json.loads((work / "state" / "front" / NAME / "token.json").read_text())["token"]
    assert token.encode() not in b" ".join(cmdline) and token not in json.dumps(record)
    assert httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=10).status_code == 200


def test_a_knob_change_under_load_fails_no_request(deployed: tuple[Path, dict]) -> None:
    work, profile = deployed
    old = docker("inspect", "-f", "{{.Id}}", NAME)
    profile["serve"]["ubatch"] = 2048
    result, load, started, ended = applied_under_load(work, profile)
    assert result.returncode == 0, result.stderr
    assert docker("inspect", "-f", "{{.Id}}", NAME) != old  # the server was replaced
    assert "hold new requests" in result.stdout + result.stderr
    report("knob change (ubatch)", load, started, ended)
    print("the hold's event:", [line for line in result.stderr.splitlines() if '"held": true' in line][:1])
    assert load.failed() == [], load.failed()[:5]
    assert any(o.stream for o in load.outcomes) and any(not o.stream for o in load.outcomes)
    # Some requests were held across the swap (the load never stopped while the server was down).
    assert len(load.between(started, ended)) >= 4


def test_a_reverted_candidate_under_load_fails_no_request(deployed: tuple[Path, dict]) -> None:
    work, profile = deployed
    good_ubatch = profile["serve"]["ubatch"]
    bad = json.loads(json.dumps(profile))
    bad["model"]["quant"] = "UD-TRUNC"
    result, load, started, ended = applied_under_load(work, bad)
    assert result.returncode == 1 and "reverted to the last good profile" in result.stderr, result.stderr
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    assert "UD-Q2_K_XL" in argv[argv.index("-m") + 1] and argv[argv.index("--ubatch-size") + 1] == str(good_ubatch)
    report("failing candidate, reverted", load, started, ended)
    assert load.failed() == [], load.failed()[:5]
    write_profile(work, profile)


def test_the_front_killed_mid_hold_refuses_then_the_next_apply_restores_it(deployed: tuple[Path, dict]) -> None:
    work, profile = deployed
    write_profile(work, profile)
    record = front_record(work)
    config = FrontConfig.from_json(record["config"])
    token = json.loads((work / "state" / "front" / NAME / "token.json").read_text())["token"]
    order = HoldOrder(drain_s=1, queue=8, wait_s=600, lease_s=600, retry_after_s=5)
    assert FrontControl().post(f"{config.control_url}/hold", token, order.to_json(), 30)[0] == 200
    outcome: dict[str, object] = {}

    def held_request() -> None:
        started = time.monotonic()
        try:
            httpx.post(
                f"http://127.0.0.1:{PORT}/v1/chat/completions",
                timeout=600,
                json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            )
            outcome["error"] = None
        except httpx.HTTPError as exc:
            outcome["error"] = type(exc).__name__
        outcome["seconds"] = time.monotonic() - started

    client = threading.Thread(target=held_request)
    client.start()
    deadline = time.monotonic() + 10
    while httpx.get(config.health_url, timeout=5).json()["held"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    killed = time.monotonic()
    os.kill(record["pid"], signal.SIGKILL)
    client.join(30)
    # The held client's connection ended with the process: an error at once, not a 600 s hang.
    assert not client.is_alive() and outcome["error"] is not None
    assert time.monotonic() - killed < 10
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=5)
    shown = kimik3(work, "plan", "profile.yaml", check=False)
    assert "front" in shown.stdout and "is not running" in shown.stdout, shown.stdout
    kimik3(work, "apply", "profile.yaml")
    assert front_record(work)["pid"] != record["pid"]
    assert httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=10).status_code == 200
