"""The rollout playbook as data (fleet/playbook.py) and the controller's router steps' capacity floor
(cli/fleet_apply.py) against an in-memory router."""

from __future__ import annotations

import json

import pytest
import yaml

from kimik3_reconciler.adapters.router_smg import RouterWorker
from kimik3_reconciler.cli.fleet_apply import _take_out
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.fleet.playbook import ROLLOUT_GROUP, RolloutHost, RouterStep, inventory, playbook

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
    (play,) = playbook("f", batches, STEP)
    assert play["serial"] == [1, 2] and play["order"] == "inventory"
    assert play["any_errors_fatal"] is True and play["max_fail_percentage"] == 0
    assert list(inventory(_hosts(), batches)["all"]["children"][ROLLOUT_GROUP]["hosts"]) == ["c", "a", "b"]


def test_every_command_is_an_argv_and_the_profile_goes_by_stdin_from_a_controller_file() -> None:
    (play,) = playbook("f", [("a",), ("b",), ("c",)], STEP)
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
    hosts = inventory(_hosts(), [("a",), ("b",), ("c",)])["all"]["children"][ROLLOUT_GROUP]["hosts"]
    assert hosts["a"]["kimik3_profile_file"] == "/run/host-1.yaml" and "profile" not in json.dumps(
        hosts["a"]["kimik3_command"]
    )


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
    _take_out(router, "a", "http://10.0.0.1:8080", 5, 2)
    assert router.removed == ["id1"]
    short = _Router([_worker(1), _worker(2), _worker(3, healthy=False)])  # one host already out of rotation
    with pytest.raises(PlanError, match="only 1 other host.*keeps 2 serving"):
        _take_out(short, "a", "http://10.0.0.1:8080", 0, 2)
    assert short.removed == []


def test_a_host_the_router_does_not_list_costs_no_capacity() -> None:
    router = _Router([])  # a first rollout: nothing serves yet
    _take_out(router, "a", "http://10.0.0.1:8080", 0, 2)
    assert router.removed == []
