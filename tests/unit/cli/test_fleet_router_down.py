"""`fleet status`'s router line (cli/fleet_router.router_problem): a router whose process was killed (nothing on the
clients' port, or smg behind kimik3's router silent) is a problem `fleet status` fails on, naming the address and
`fleet apply` as what starts it again; a router that answers as its layout wants is none."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from support.json_http import JsonHandler
from support.ports import free_port

from kimik3_reconciler.cli.fleet_router import record_path, router_now, router_problem
from kimik3_reconciler.fleet.router_layout import router_layout
from kimik3_reconciler.fleet.values import RouterPlacement


class Smg(JsonHandler):
    """smg's `GET /workers` (what router_now and router_problem ask it), an empty list."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_json(200, {"workers": []})


@pytest.fixture
def smg_port() -> Iterator[int]:
    port = free_port()
    with ThreadingHTTPServer(("127.0.0.1", port), Smg) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield port
        server.shutdown()


@pytest.mark.parametrize("policy", ["slots", "cache_aware"])
def test_nothing_on_the_clients_port_is_a_problem_naming_fleet_apply(policy: str) -> None:
    layout = router_layout(RouterPlacement("smg", "1.13.0", "localhost", free_port(), policy))
    problem = router_problem(layout, router_now(layout))
    assert problem is not None and layout.url in problem and "`fleet apply` starts it" in problem


def test_smg_alone_answering_on_the_clients_port_is_no_problem(smg_port: int) -> None:
    layout = router_layout(RouterPlacement("smg", "1.13.0", "localhost", smg_port, "round_robin"))
    assert router_now(layout) == "smg"
    assert router_problem(layout, "smg") is None


def test_smg_behind_kimik3s_router_silent_is_a_problem() -> None:
    layout = router_layout(RouterPlacement("smg", "1.13.0", "localhost", free_port(), "slots"))
    problem = router_problem(layout, "kimik3 router")  # the router answers; nothing on port + 2
    assert problem is not None and layout.smg_url in problem and "rotation is not read" in problem


def _status(tmp_path, monkeypatch: pytest.MonkeyPatch, started: bool):  # noqa: ANN001, ANN202
    """`fleet status --json` of two fine hosts with nothing on router.port; `started`: a record says `fleet apply`
    started the router (its process since killed)."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    import kimik3_reconciler.cli.fleet_cmd as fleet_cmd
    from kimik3_reconciler.cli import main
    from kimik3_reconciler.fleet.gather import HostAnswer

    demo = Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml"
    (tmp_path / "demo-cpu.yaml").write_text(demo.read_text())
    port = free_port()
    (tmp_path / "fleet.yaml").write_text(
        "apiVersion: kimik3/v1\nkind: Fleet\nname: f\nprofile: demo-cpu.yaml\n"
        "inventory: {all: {hosts: {a: {ansible_host: 127.0.0.1}, b: {ansible_host: 127.0.0.2}}}}\n"
        f'router: {{version: "1.13.0", port: {port}}}\n'
    )
    running = {"container": {"state": "running", "started_at": "2026-12-05T04:00:00.000000000Z"}, "workers": []}
    monkeypatch.setattr(
        fleet_cmd, "_answers", lambda fleet, words, timeout: tuple(HostAnswer(h, running) for h in "ab")
    )
    monkeypatch.setattr(fleet_cmd, "_router_rows", lambda fleet: {})
    monkeypatch.setattr(fleet_cmd, "_server_readings", lambda fleet, answers: {})
    env = {"KIMIK3_STATE_DIR": str(tmp_path / "state"), "KIMIK3_CACHE_DIR": str(tmp_path / "cache")}
    if started:
        record = record_path(tmp_path / "state", "f")
        record.parent.mkdir(parents=True)
        record.write_text(json.dumps({"pid": 1}))
    result = CliRunner().invoke(main, ["fleet", "status", "--json", str(tmp_path / "fleet.yaml")], env=env)
    return result, json.loads(result.stdout), port


def test_fleet_status_fails_when_its_router_does_not_answer(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The hosts all fine, nothing on router.port where `fleet apply` started a router (its process killed): exit 3,
    `"ok": false`, the router named (before, `fleet status` said "nothing answers" and exited 0)."""
    result, document, port = _status(tmp_path, monkeypatch, started=True)
    assert all(row["ok"] for row in document["hosts"]), document["hosts"]
    assert result.exit_code == 3 and not document["ok"] and not document["router"]["ok"]
    assert f"127.0.0.1:{port}" in result.stderr and "`fleet apply` starts it" in result.stderr


def test_fleet_status_of_a_fleet_not_rolled_out_yet_says_the_router_is_not_started(
    tmp_path,  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing on router.port and no record of a router `fleet apply` started (a fleet planned, never applied: the
    rig's plan-and-status test): said, exit 0, not a dead router."""
    result, document, _ = _status(tmp_path, monkeypatch, started=False)
    assert result.exit_code == 0, result.stderr
    assert document["ok"] and document["router"]["ok"] and "not started" in document["router"]["answering"]
