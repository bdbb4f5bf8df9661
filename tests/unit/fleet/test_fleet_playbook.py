"""The rollout playbook as data (fleet/playbook.py) and the controller's router steps' capacity floor
(cli/fleet_apply.py) against an in-memory router."""

from __future__ import annotations

import json

import pytest
import yaml

from kimik3_reconciler.adapters.router_smg import RouterWorker
from kimik3_reconciler.cli.fleet_apply import _take_out
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.fleet.playbook import (
    ROLLOUT_GROUP,
    SITE_GROUP,
    RolloutHost,
    RouterStep,
    inventory,
    mirror_stop_playbook,
    playbook,
)

STEP = RouterStep(
    ("py", "-m", "kimik3_reconciler", "fleet", "router-step"),
    "http://127.0.0.1:30000",
    "http://127.0.0.1:30001",
    60.0,
    2,
)


def _hosts() -> list[RolloutHost]:
    return [
        RolloutHost(
            n,
            {"ansible_host": f"10.0.0.{i}", "ansible_user": "root"},
            ("/opt/kimik3/bin/kimik3",),
            f"http://10.0.0.{i}:8080",
            f"/run/host-{i}.yaml",
        )
        for i, n in enumerate(["a", "b", "c"], 1)
    ]


def test_the_play_rolls_in_the_policy_batches_canary_first_and_halts_on_any_failure() -> None:
    batches = [("c",), ("a", "b")]  # c is the canary, alone; then a batch of two
    *_, play = playbook("f", batches, STEP)
    assert play["serial"] == [1, 2] and play["order"] == "inventory"
    assert play["any_errors_fatal"] is True and play["max_fail_percentage"] == 0
    assert list(inventory(_hosts(), batches)["all"]["children"][ROLLOUT_GROUP]["hosts"]) == ["c", "a", "b"]


def test_every_command_is_an_argv_and_the_profile_goes_by_stdin_from_a_controller_file() -> None:
    *_, play = playbook("f", [("a",), ("b",), ("c",)], STEP)
    out, block, back = play["tasks"]
    assert [t["name"] for t in block["block"]] == ["gate: apply", "gate: converged", "gate: verify"]
    for task in [out, back, *block["block"], block["rescue"][0]]:
        command = task["ansible.builtin.command"]
        assert set(command) <= {"argv", "stdin"}  # never `cmd` / a shell string
    apply = block["block"][0]["ansible.builtin.command"]
    assert apply["argv"] == "{{ kimik3_command + ['apply', '/dev/stdin'] }}"
    assert apply["stdin"] == "{{ lookup('ansible.builtin.file', kimik3_profile_file) }}"
    assert out["delegate_to"] == back["delegate_to"] == "localhost"
    assert out["ansible.builtin.command"]["argv"][5:7] == ["out", "--drain-timeout"]
    assert "--min-serving" in out["ansible.builtin.command"]["argv"]
    rescue_in, halt = block["rescue"]
    assert "--failed-gate" in rescue_in["ansible.builtin.command"]["argv"]
    assert "{{ inventory_hostname }} failed {{ ansible_failed_task.name }}" in halt["ansible.builtin.fail"]["msg"]
    yaml.safe_load(yaml.safe_dump([play]))  # plain data
    hosts = inventory(_hosts(), [("a",), ("b",), ("c",)])["all"]["children"][SITE_GROUP]["hosts"]
    assert hosts["a"]["kimik3_profile_file"] == "/run/host-1.yaml" and "profile" not in json.dumps(
        hosts["a"]["kimik3_command"]
    )


def test_every_host_serves_its_files_before_the_rollout_and_each_apply_asks_the_others_first() -> None:
    """Bytes once per site: the mirror play (every host of the fleet, a host an earlier run rolled included) comes
    before the rollout play; each host's apply gets the others' mirrors in rollout order (KIMIK3_PEERS); the
    mirrors are stopped by a playbook of their own (run after the rollout whatever its outcome)."""
    hosts = [
        RolloutHost(h.name, h.connection, h.kimik3_command, h.worker_url, h.profile_file, mirror_port=8089, peers=peers)
        for h, peers in zip(_hosts(), [("http://10.0.0.3:8089", "http://10.0.0.2:8089"), (), ()])
    ]
    mirror, play = playbook("f", [("c",), ("a",)], STEP)  # b: rolled by a run that stopped
    assert mirror["hosts"] == SITE_GROUP and play["hosts"] == ROLLOUT_GROUP
    (start,) = mirror["tasks"]
    assert start["ansible.builtin.command"]["argv"] == (
        "{{ kimik3_command + ['fleet', 'mirror', 'start', '--port', kimik3_mirror_port | string, "
        "'--lifetime', '21600', '/dev/stdin'] }}"
    )
    assert "{{" not in start["ansible.builtin.command"]["argv"][2:]  # no template nested in the expression
    assert start["ansible.builtin.command"]["stdin"] == "{{ lookup('ansible.builtin.file', kimik3_profile_file) }}"
    assert start["ignore_errors"] is True  # a mirror that does not start costs hub bytes, not the rollout
    apply = play["tasks"][1]["block"][0]
    assert apply["environment"] == {"KIMIK3_PEERS": "{{ kimik3_peers }}"}
    groups = inventory(hosts, [("c",), ("a",)])["all"]["children"]
    assert list(groups[ROLLOUT_GROUP]["hosts"]) == ["c", "a"]
    assert list(groups[SITE_GROUP]["hosts"]) == ["c", "a", "b"]
    assert groups[SITE_GROUP]["hosts"]["a"]["kimik3_peers"] == "http://10.0.0.3:8089,http://10.0.0.2:8089"
    (stop,) = mirror_stop_playbook()
    assert stop["hosts"] == SITE_GROUP
    assert stop["tasks"][0]["ansible.builtin.command"]["argv"] == "{{ kimik3_command + ['fleet', 'mirror', 'stop'] }}"


def test_with_a_registry_the_first_host_pushes_what_it_serves_and_the_later_ones_pull_it_by_digest() -> None:
    *_, play = playbook("f", [("c",), ("a",), ("b",)], STEP, registry="10.0.0.9:5000")
    names = [t.get("name") for t in play["tasks"]]
    assert names[:2] == ["image: pull", "router: out"]  # pulled while the host still serves
    assert names[-2:] == ["image: push", "image: the reference the others pull"]  # after its gates passed
    pull, push, share = play["tasks"][0], play["tasks"][-2], play["tasks"][-1]
    assert pull["when"] == "inventory_hostname != 'c' and hostvars['c']['kimik3_image'] is defined"
    assert pull["ansible.builtin.command"]["argv"] == (
        "{{ kimik3_command + ['fleet', 'image', 'pull', hostvars['c']['kimik3_image']] }}"
    )
    assert push["when"] == share["when"] == "inventory_hostname == 'c'"
    assert "'--registry', '10.0.0.9:5000'" in push["ansible.builtin.command"]["argv"]
    assert share["ansible.builtin.set_fact"] == {"kimik3_image": "{{ (kimik3_pushed.stdout | from_json).ref }}"}
    *_, plain = playbook("f", [("c",), ("a",)], STEP)
    assert not [t for t in plain["tasks"] if str(t.get("name", "")).startswith("image:")]


class _Router:
    def __init__(self, workers: list[RouterWorker]) -> None:
        self.listed, self.removed = workers, []

    def workers(self) -> list[RouterWorker]:
        return [w for w in self.listed if w.id not in self.removed]

    def find(self, url: str) -> RouterWorker | None:
        return next((w for w in self.workers() if w.url == url), None)

    def remove(self, worker_id: str) -> None:
        self.removed.append(worker_id)

    def wait_gone(self, worker_id: str, timeout_s: float) -> bool:
        return True


def _worker(n: int, healthy: bool = True) -> RouterWorker:
    return RouterWorker(f"id{n}", f"http://10.0.0.{n}:8080", "ready", healthy, "closed")


def test_a_host_is_taken_out_only_while_the_floor_stays_in_rotation() -> None:
    router = _Router([_worker(1), _worker(2), _worker(3)])
    _take_out(router, "a", "http://10.0.0.1:8080", 5, 2, lambda: 0)
    assert router.removed == ["id1"]  # a rollout removes: a hold is not safe (bench/router_hold.py)
    short = _Router([_worker(1), _worker(2), _worker(3, healthy=False)])  # one host already out of rotation
    with pytest.raises(PlanError, match="only 1 other host.*keeps 2 serving"):
        _take_out(short, "a", "http://10.0.0.1:8080", 0, 2, lambda: 0)
    assert short.removed == []


def test_a_host_the_router_does_not_list_costs_no_capacity() -> None:
    router = _Router([])  # a first rollout: nothing serves yet
    _take_out(router, "a", "http://10.0.0.1:8080", 0, 2, lambda: 0)
    assert router.removed == []


def test_out_waits_past_the_routers_drain_until_the_server_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """Out of smg's rotation is not idle (the requests smg sent there run on): the step reads the server's own count
    until it is 0 (a reply still running there would be cut by the apply that follows)."""
    router = _Router([_worker(1), _worker(2), _worker(3)])
    counts = iter([2, 1, 0, 1] + [0] * 10 + [5])  # one 0 between a slot's end and the next queued request's start
    _take_out(router, "a", "http://10.0.0.1:8080", 30, 2, lambda: next(counts))
    rest = list(counts)
    assert rest[-1] == 5 and len(rest) <= 6  # past the lone 0, until 0 held for 1 s (5+ reads at 0.2 s), no further
    assert "its requests ended" in capsys.readouterr().out
    busy = _Router([_worker(1), _worker(2), _worker(3)])
    _take_out(busy, "a", "http://10.0.0.1:8080", 0.5, 2, lambda: 1)  # never idle: goes on at the drain timeout
    assert "drain timeout ended with 1 request(s) still on its server" in capsys.readouterr().out
    _take_out(_Router([_worker(1), _worker(2), _worker(3)]), "a", "http://10.0.0.1:8080", 5, 2, lambda: None)
    assert "does not say what it runs" in capsys.readouterr().out


def test_the_out_step_names_the_servers_in_flight_gauges() -> None:
    hosts = [RolloutHost("a", {}, ("k",), "http://10.0.0.1:8080", "/p", ("x:running", "x:waiting"))]
    *_, play = playbook("f", [("a",)], STEP)
    argv = play["tasks"][0]["ansible.builtin.command"]["argv"]
    assert argv[argv.index("--in-flight-series") + 1] == "{{ kimik3_in_flight_series }}"
    listed = inventory(hosts, [("a",)])["all"]["children"][SITE_GROUP]["hosts"]["a"]  # host vars: the site group
    assert listed["kimik3_in_flight_series"] == "x:running,x:waiting"


@pytest.mark.parametrize("port", ["8089", 0, 70000, True])
def test_a_mirror_port_that_is_no_port_is_refused_naming_the_host(port: object) -> None:
    """fleet validation refuses it at its line (tests/cases/fleet/mirror_port_*.yaml); `fleet apply` keeps the guard
    for a Fleet made elsewhere."""
    from types import SimpleNamespace

    from kimik3_reconciler.cli.fleet_apply import mirror_port
    from kimik3_reconciler.errors import InputError

    host = SimpleNamespace(name="a", vars={"kimik3_mirror_port": port})
    with pytest.raises(InputError, match=r"^a: kimik3_mirror_port: a TCP port"):
        mirror_port(host)
    assert mirror_port(SimpleNamespace(name="a", vars={})) == 8089


def test_both_router_steps_get_the_hosts_profile_and_the_hot_prompts_for_the_warm_step() -> None:
    """Issue 40 item 2: `out` decides from the host's new profile whether to save its slots; `in` restores them or
    prefills the fleet's declared hot prompts (a controller file); without warm_prompts no such argument."""
    from dataclasses import replace

    *_, play = playbook("f", [("a",)], replace(STEP, warm_prompts="/srv/fleet/hot.yaml"))
    out, block, back = play["tasks"]
    for task in (out, back, block["rescue"][0]):
        argv = task["ansible.builtin.command"]["argv"]
        assert argv[argv.index("--profile") + 1] == "{{ kimik3_profile_file }}"
        assert argv[argv.index("--warm-prompts") + 1] == "/srv/fleet/hot.yaml"
    *_, play = playbook("f", [("a",)], STEP)
    assert "--warm-prompts" not in play["tasks"][0]["ansible.builtin.command"]["argv"]


def test_the_in_step_warms_the_server_before_the_router_sends_it_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3_reconciler.cli import fleet_apply

    events: list[str] = []

    class Router(_Router):
        def add(self, url: str) -> None:
            events.append("added")
            self.listed = [*self.listed, RouterWorker("id9", url, "ready", True, "closed")]

        def wait_in_rotation(self, url: str, timeout_s: float) -> RouterWorker:
            return self.find(url)

    monkeypatch.setattr(fleet_apply, "_serves", lambda url: events.append("health") or True)
    monkeypatch.setattr(fleet_apply, "_served_tokens", lambda url, api_key: None)
    fleet_apply._put_back(Router([]), "a", "http://10.0.0.9:8080", 0, lambda: events.append("warmed"))
    assert events == ["health", "warmed", "added"]
