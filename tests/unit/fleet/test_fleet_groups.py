"""A llama.cpp main server with its RPC workers is one replica (issue 36 item 6): the group in the fleet file, its
workers' state read from the main host's status, and the recovery of a group whose worker died, decided with an
in-memory router and host shell (the real ones: tests/integration/test_fleet_rpc_rig.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.errors import ProfileError, StepError
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.gather import HostAnswer
from kimik3_reconciler.fleet.groups import member_states
from kimik3_reconciler.fleet.recovery import dead_groups, recover
from kimik3_reconciler.fleet.report import group_line, status_lines, status_row
from kimik3_reconciler.fleet.values import FleetHost

CASES = Path(__file__).parents[2] / "cases" / "fleet"
DEMO = Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml"
MAIN_STARTED = "2026-12-05T04:00:00.000000000Z"


def _fleet(tmp_path: Path, text: str, profile: str | None = None):  # noqa: ANN202 - fleet.Fleet
    (tmp_path / "demo-cpu.yaml").write_text(profile if profile is not None else DEMO.read_text())
    (tmp_path / "fleet.yaml").write_text(text)
    return parse_fleet(text, str(tmp_path / "fleet.yaml"), read_text)


@pytest.fixture
def groups(tmp_path: Path):  # noqa: ANN201 - fleet.Fleet: a, b are groups (a worker host each), c a plain replica
    return _fleet(tmp_path, yaml.safe_load((CASES / "ok_rpc_groups.yaml").read_text())["fleet"])


def _status(worker: dict | None = None, **container: object) -> dict:
    return {
        "container": {"state": "running", "started_at": MAIN_STARTED, **container},
        "workers": [worker] if worker is not None else [],
    }


def _worker(name: str, **fact: object) -> dict:
    return {
        "name": name,
        "container": {"state": "running", "started_at": "2026-12-05T03:59:00.000000000Z"},
        "port_open": True,
        **fact,
    }


def test_workers_the_profile_names_for_every_host_are_refused_in_the_profile_at_their_line(tmp_path: Path) -> None:
    """Two hosts sharing one worker: rpc-server serves one main server; named in the profile, where it is written."""
    profile = DEMO.read_text() + (
        "rpc:\n  workers:\n    - name: w\n      docker: ssh://k3@10.0.0.9\n      bind: 10.0.0.9\n"
    )
    lines = profile.splitlines()
    docker_line = next(i for i, line in enumerate(lines, 1) if "docker: ssh://k3@10.0.0.9" in line)
    text = yaml.safe_load((CASES / "ok_rpc_groups.yaml").read_text())["fleet"]
    text = text.split("overrides:")[0] + (
        "overrides:\n  a: {serve: {host: 10.0.0.1}}\n  b: {serve: {host: 10.0.0.2}}\n  c: {serve: {host: 10.0.0.3}}\n"
        'router: {version: "1.13.0"}\n'
    )
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, text, profile)
    got = [(p.source, p.line, p.field) for p in refused.value.problems]
    # b and c each find w already a's: one problem each, both at the profile's line
    assert got == [(str(tmp_path / "demo-cpu.yaml"), docker_line, "rpc.workers[0].docker")] * 2
    assert "already host a's worker w" in refused.value.problems[0].message


def test_a_group_is_one_replica_of_the_rollout_its_workers_listed_under_it(groups) -> None:  # noqa: ANN001
    assert [h.name for h in groups.hosts] == ["a", "b", "c"]  # the worker hosts are no replicas
    assert groups.rollout.batches() == (("a",), ("b",), ("c",)) and groups.rollout.min_serving == 2
    assert group_line(groups.host("a")) == (
        "  group: replica a spans hosts a, 10.0.0.11: its main server and RPC workers wa on 10.0.0.11 "
        "(10.0.0.11:50052): one replica "
        "(out, applied, gated, back in together)"
    )


@pytest.mark.parametrize(
    ("fact", "state", "why"),
    [
        (_worker("wa"), "up", ""),
        ({"name": "wa", "container": None}, "dead", "no rpc-server container"),
        (_worker("wa", container={"state": "exited", "started_at": "x"}), "dead", "rpc-server container exited"),
        (_worker("wa", port_open=False), "dead", "10.0.0.11:50052 does not accept connections"),
        (
            _worker("wa", container={"state": "running", "started_at": "2026-12-05T04:10:00.000000000Z"}),
            "dead",
            "rpc-server restarted after the main server started",
        ),
        (
            {"name": "wa", "error": "ssh: connect refused"},
            "unknown",
            "its Docker does not answer: ssh: connect refused",
        ),
    ],
)
def test_a_workers_state_comes_from_its_main_hosts_status(groups, fact: dict, state: str, why: str) -> None:  # noqa: ANN001
    (got,) = member_states(groups.host("a"), _status(fact))
    assert (got.state, got.why) == (state, why)


def test_only_groups_with_a_worker_known_dead_are_recovered(groups) -> None:  # noqa: ANN001
    answers = (
        HostAnswer("a", _status(_worker("wa", container={"state": "exited"}))),
        HostAnswer("b", _status({"name": "wb", "error": "ssh exited 255"})),  # unknown: nothing says it is gone
        HostAnswer("c", _status()),  # no workers: not a group
    )
    dead = dead_groups(groups, answers)
    assert list(dead) == ["a"] and dead["a"][0].why == "rpc-server container exited"
    assert dead_groups(groups, (HostAnswer("a", None, "unreachable", "a is unreachable"),)) == {}


class FakeRouter:
    def __init__(self, events: list[str], refuse: str = "") -> None:
        self.events, self.refuse = events, refuse

    def take_out(self, host: FleetHost) -> str:
        self.events.append(f"out {host.name}")
        return "taken out of the router"

    def put_back(self, host: FleetHost) -> str:
        if host.name == self.refuse:
            raise StepError(f"{host.name}: its server does not answer /health: left out of the router")
        self.events.append(f"in {host.name}")
        return "back in rotation, sent traffic"


class FakeShell:
    """Each host's kimik3 exits 0, except `fails` {host: subcommand}; what ran, in order, into `events`."""

    def __init__(self, events: list[str], fails: dict[str, str] | None = None) -> None:
        self.events, self.fails = events, fails or {}

    def run(self, host: FleetHost, argv: Sequence[str], stdin: str | None, timeout_s: float) -> tuple[int, str, str]:
        assert stdin == host.profile_text  # the profile travels on stdin, never in argv
        word = argv[len(host.kimik3_command)]
        self.events.append(f"{word} {host.name}")
        if self.fails.get(host.name) == word:
            return 1, "", f"kimik3 {word}: rpc check failed\n"
        return 0, "", ""


def _dead(groups, *names: str):  # noqa: ANN001, ANN202
    return dead_groups(
        groups, tuple(HostAnswer(n, _status(_worker(f"w{n}", container={"state": "exited"}))) for n in names)
    )


def test_a_dead_group_leaves_the_router_before_its_apply_and_returns_after_every_gate(groups) -> None:  # noqa: ANN001
    events: list[str] = []
    said: list[str] = []
    (done,) = recover(groups, _dead(groups, "a"), FakeRouter(events), FakeShell(events), 60, said.append)
    assert events == ["out a", "apply a", "plan a", "verify a", "in a"]
    assert done.ok and done.message == "a: recreated, back in rotation, sent traffic"
    assert said[0] == "a: worker dead (wa dead (rpc-server container exited)): taken out of the router"


def test_a_group_failing_a_gate_stays_out_of_the_router_named_with_its_gate(groups) -> None:  # noqa: ANN001
    events: list[str] = []
    results = recover(
        groups, _dead(groups, "a", "b"), FakeRouter(events), FakeShell(events, {"a": "verify"}), 60, lambda _: None
    )
    # both dead groups leave the router first (neither can serve), then each is re-converged
    assert events[:2] == ["out a", "out b"]
    assert "in a" not in events and "in b" in events
    a, b = results
    assert (a.ok, a.failed, b.ok) == (False, "verify", True)
    assert a.message.startswith(
        "a failed gate verify (exit 1: kimik3 verify: rpc check failed); left out of the router"
    )


def test_a_group_the_router_will_not_take_back_is_named(groups) -> None:  # noqa: ANN001
    events: list[str] = []
    (a,) = recover(groups, _dead(groups, "a"), FakeRouter(events, refuse="a"), FakeShell(events), 60, lambda _: None)
    assert (a.ok, a.failed) == (False, "router: in") and "does not answer /health" in a.message


def test_fleet_status_shows_each_groups_workers(groups) -> None:  # noqa: ANN001
    rows = [
        status_row(groups, HostAnswer("a", _status(_worker("wa", port_open=False)), version="1"), {}),
        status_row(groups, HostAnswer("c", _status(), version="1"), {}),
    ]
    assert rows[0]["workers"] == [
        {
            "name": "wa",
            "endpoint": "10.0.0.11:50052",
            "state": "dead",
            "why": "10.0.0.11:50052 does not accept connections",
        }
    ]
    assert "workers" not in rows[1]
    header, a, c = status_lines(rows)
    assert header.split()[-1] == "group"
    assert a.endswith("wa dead (10.0.0.11:50052 does not accept connections)") and c.endswith("-")
    # a fleet without groups keeps its columns
    assert status_lines(rows[1:])[0].split()[-1] == "drift"


def test_fleet_plan_lists_a_groups_workers_under_its_main_host(groups) -> None:  # noqa: ANN001
    from kimik3_reconciler.fleet.host_plan import HostPlan
    from kimik3_reconciler.fleet.pricing import price_rollout
    from kimik3_reconciler.fleet.report import plan_document, plan_lines

    answers = tuple(HostAnswer(n, {}, version="1") for n in ("a", "b", "c"))
    plans = {
        n: HostPlan(n, True, "converged", (), False, 0.0, None, 0, 0, "r@v/q", "https://hub") for n in ("a", "b", "c")
    }
    price = price_rollout(groups.rollout, plans)
    lines = plan_lines(groups, answers, plans, price)
    assert lines[:4] == [
        "host a (10.0.0.1): converged",
        group_line(groups.host("a")),
        "host b (10.0.0.2): converged",
        group_line(groups.host("b")),
    ]
    assert lines[4] == "host c (10.0.0.3): converged"
    hosts = plan_document(groups, answers, plans, price)["hosts"]
    assert hosts[0]["workers"] == [{"name": "wa", "kind": "worker", "host": "10.0.0.11", "endpoint": "10.0.0.11:50052"}]
    assert hosts[0]["spans"] == ["a", "10.0.0.11"]
    assert "workers" not in hosts[2]


def _recover(tmp_path: Path, *args: str):  # noqa: ANN202 - click's Result
    from click.testing import CliRunner

    from kimik3_reconciler.cli import main

    env = {"KIMIK3_STATE_DIR": str(tmp_path / "state"), "KIMIK3_CACHE_DIR": str(tmp_path / "cache")}
    return CliRunner().invoke(main, ["fleet", "recover", *args, str(tmp_path / "fleet.yaml")], env=env)


def test_recover_never_runs_beside_a_rollout_and_watch_waits_for_the_next_pass(groups, tmp_path: Path) -> None:  # noqa: ANN001
    from kimik3_reconciler.adapters.ansible_play import FleetLock

    with FleetLock(tmp_path / "state" / "fleet" / "f" / "lock"):  # a `fleet apply` running
        once = _recover(tmp_path)
        watching = _recover(tmp_path, "--watch", "--iterations", "1", "--interval", "1s")
    assert once.exit_code == 5 and "holds the fleet lock" in once.stderr
    assert watching.exit_code == 0 and "looking again in 1 s" in watching.stderr


def test_recover_of_a_fleet_without_groups_does_nothing(tmp_path: Path) -> None:
    text = yaml.safe_load((CASES / "same_address_same_port.yaml").read_text())["fleet"]
    _fleet(tmp_path, text.replace("b: {ansible_host: 127.0.0.1}", "b: {ansible_host: 127.0.0.2}"))
    result = _recover(tmp_path)
    assert result.exit_code == 0 and "no host has RPC workers or cluster nodes: nothing to recover" in result.stdout


def _wire(monkeypatch, events: list[str], statuses: list[dict], fails: dict[str, str]) -> None:  # noqa: ANN001
    """`fleet recover`'s ports replaced: each pass's status answers from `statuses` (one per pass), a FakeRouter,
    a FakeShell failing `fails` (changed between passes by the test)."""
    import kimik3_reconciler.adapters.ssh_shell as ssh_shell
    import kimik3_reconciler.cli.fleet_cmd as fleet_cmd
    import kimik3_reconciler.cli.fleet_recover as fleet_recover

    class Router(FakeRouter):
        def __init__(self, *_: object) -> None:
            super().__init__(events)

        def close(self) -> None:
            pass

    monkeypatch.setattr(fleet_cmd, "_answers", lambda fleet, words, timeout: (HostAnswer("a", statuses.pop(0)),))
    monkeypatch.setattr(fleet_recover, "_Router", Router)
    monkeypatch.setattr(ssh_shell, "SshShell", lambda: FakeShell(events, fails))


def test_a_group_a_failed_pass_left_out_of_the_router_is_recovered_by_the_next_pass(
    groups,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pass 1: a's worker dead, taken out, applied (its worker relaunched, its main server replaced), verify fails:
    left out. Pass 2 sees the worker up (started before the new main server); the group is still out of the router,
    so it must be gated again and put back, not left out for good."""
    events: list[str] = []
    fails = {"a": "verify"}
    dead = _status(_worker("wa", container={"state": "exited"}))
    up = _status(_worker("wa"), started_at="2026-12-05T05:00:00.000000000Z")
    _wire(monkeypatch, events, [dead, up, up], fails)
    first = _recover(tmp_path)
    assert first.exit_code == 1 and "a failed gate verify" in first.stderr
    assert events == ["out a", "apply a", "plan a", "verify a"]
    fails.clear()  # the cause is fixed (a device back, a retry that passes)
    events.clear()
    second = _recover(tmp_path)
    assert second.exit_code == 0, second.output
    assert events == ["out a", "apply a", "plan a", "verify a", "in a"]
    events.clear()
    third = _recover(tmp_path)  # back in: nothing is left to do
    assert third.exit_code == 0 and events == []


def test_recover_watch_outlives_a_pass_the_router_fails(
    groups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """The router down for one pass: `--watch` (the supervisor's loop) says so and looks again, it does not exit."""
    import kimik3_reconciler.cli.fleet_recover as fleet_recover
    from kimik3_reconciler.adapters.router_smg import RouterError

    events: list[str] = []
    dead = _status(_worker("wa", container={"state": "exited"}))
    _wire(monkeypatch, events, [dead, dead], {})
    down = [True]

    class Router(FakeRouter):
        def __init__(self, *_: object) -> None:
            super().__init__(events)

        def take_out(self, host: FleetHost) -> str:
            if down.pop(0) if down else False:
                raise RouterError("router http://127.0.0.1:30000: GET /workers: connection refused")
            return super().take_out(host)

        def close(self) -> None:
            pass

    monkeypatch.setattr(fleet_recover, "_Router", Router)
    result = _recover(tmp_path, "--watch", "--iterations", "2", "--interval", "1s")
    assert "connection refused" in result.stderr and "looking again in 1 s" in result.stderr
    assert events == ["out a", "apply a", "plan a", "verify a", "in a"]  # the second pass recovered it
    assert result.exit_code == 0, result.output


def test_recover_json_is_one_document_on_stdout(groups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    import json

    events: list[str] = []
    _wire(monkeypatch, events, [_status(_worker("wa", container={"state": "exited"}))], {})
    result = _recover(tmp_path, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["recovered"][0]["ok"] and document["recovered"][0]["host"] == "a"


@pytest.mark.parametrize("docker", ["ssh://k3@127.0.0.1", "ssh://k3@localhost:2222", "tcp://[::1]:2376"])
def test_a_worker_on_each_main_hosts_own_loopback_is_inside_its_group(tmp_path: Path, docker: str) -> None:
    """A worker's Docker URL is dialled from its main host: a loopback one is that host's own daemon, so the
    profile's loopback worker is each host's own (not one host two groups share)."""
    tls = "      tls_dir: /etc/k3/tls\n" if docker.startswith("tcp") else ""
    profile = (
        DEMO.read_text() + f"rpc:\n  workers:\n    - name: w\n      docker: {docker}\n{tls}      bind: 127.0.0.1\n"
    )
    fleet = _fleet(
        tmp_path,
        "apiVersion: kimik3/v1\nkind: Fleet\nname: f\nprofile: demo-cpu.yaml\ninventory:\n  all:\n"
        "    hosts: {a: {ansible_host: 10.0.0.1}, b: {ansible_host: 10.0.0.2}}\n"
        "overrides:\n  a: {serve: {host: 10.0.0.1}}\n  b: {serve: {host: 10.0.0.2}}\n"
        'router: {version: "1.13.0"}\n',
        profile,
    )
    assert [h.name for h in fleet.hosts if h.profile.workers] == ["a", "b"]


def test_recover_json_of_a_fleet_without_groups_is_a_json_document(tmp_path: Path) -> None:
    import json

    text = yaml.safe_load((CASES / "same_address_same_port.yaml").read_text())["fleet"]
    _fleet(tmp_path, text.replace("b: {ansible_host: 127.0.0.1}", "b: {ansible_host: 127.0.0.2}"))
    result = _recover(tmp_path, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"fleet": "f", "groups": {}, "recovered": []}


def test_a_worker_host_in_the_rollouts_group_is_refused_with_how_to_keep_it_out(tmp_path: Path) -> None:
    """An Ansible user lists every machine in the inventory, worker hosts too; rollout.hosts (default `all`) then
    makes the worker a replica. The refusal says how to keep it a worker only."""
    text = yaml.safe_load((CASES / "rpc_worker_is_a_replica.yaml").read_text())["fleet"]
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, text)
    assert "rollout.hosts" in str(refused.value)


def test_a_worker_restarted_within_the_main_servers_whole_second_is_dead(groups) -> None:  # noqa: ANN001
    """Docker's RFC 3339 drops a zero fraction ("...:00Z"): compared as text, '.5Z' sorts before 'Z'; as times, the
    worker started half a second after the main server (as the host's own planner reads them)."""
    status = _status(_worker("wa", container={"state": "running", "started_at": "2026-12-05T04:00:00.5Z"}))
    status["container"]["started_at"] = "2026-12-05T04:00:00Z"
    (state,) = member_states(groups.host("a"), status)
    assert (state.state, state.why) == ("dead", "rpc-server restarted after the main server started")
    # a main container never started (Docker's zero time) says nothing of when its workers started
    status["container"]["started_at"] = "0001-01-01T00:00:00Z"
    assert member_states(groups.host("a"), status)[0].state == "up"


def test_recovers_router_takes_a_group_out_as_the_rollout_does_waiting_for_its_servers_requests(
    groups,  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fleet recover's own router step (not a fake of it): `_take_out` takes the server's in-flight count since the
    drain waits on it; recover called it without one (TypeError the first time a listed group was taken out)."""
    import kimik3_reconciler.cli.fleet_apply as fleet_apply
    import kimik3_reconciler.cli.fleet_recover as fleet_recover

    taken: list[tuple] = []

    def take_out(router, host_name, worker, drain_timeout, min_serving, in_flight) -> None:  # noqa: ANN001
        taken.append((host_name, worker, drain_timeout, min_serving, callable(in_flight)))

    monkeypatch.setattr(fleet_apply, "_take_out", take_out)
    router = fleet_recover._Router.__new__(fleet_recover._Router)
    router.router = SimpleNamespace(find=lambda url: object())  # smg lists it
    router.drain_timeout_s = 60
    host = groups.host("a")
    assert router.take_out(host) == "taken out of the router"
    assert taken == [("a", fleet_apply.worker_url(host), 60, 0, True)]
