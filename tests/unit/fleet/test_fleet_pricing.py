"""The rollout priced from fake host plans (fleet/pricing.py, fleet/host_plan.py), and the gathering of answers
through a fake shell (fleet/gather.py): pure, no SSH (tests/integration/test_fleet_ssh.py runs the real one)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from kimik3_reconciler.fleet.gather import ask, gather
from kimik3_reconciler.fleet.host_plan import HostPlan, read_host_plan
from kimik3_reconciler.fleet.pricing import price_rollout
from kimik3_reconciler.fleet.values import FleetHost, RolloutPolicy

HUB = "http://127.0.0.1:18080"
MODEL = "org/K3@0123456789ab/UD-Q2_K_XL"


def plan(
    host: str, downtime_s: float | None = 40.0, fetch: int = 0, build_s: float | None = None, converged: bool = False
) -> HostPlan:
    return HostPlan(
        host,
        converged,
        "no changes" if converged else "1 to replace",
        (),
        not converged,
        downtime_s,
        build_s,
        fetch,
        0,
        MODEL,
        HUB,
    )


def policy(
    hosts: tuple[str, ...] = ("a", "b", "c"),
    canary: tuple[str, ...] = ("a",),
    max_unavailable: int = 1,
    drain_s: float = 60.0,
) -> RolloutPolicy:
    return RolloutPolicy(hosts, canary, max_unavailable, "halt", drain_s)


def test_canary_first_then_batches_each_priced_by_its_slowest_host() -> None:
    price = price_rollout(
        policy(("a", "b", "c", "d", "e"), ("c",), 2),
        {h: plan(h, downtime_s=d) for h, d in zip("abcde", (10, 30, 20, 5, 50))},
    )
    assert [b.hosts for b in price.batches] == [("c",), ("a", "b"), ("d", "e")]
    assert [b.canary for b in price.batches] == [True, False, False]
    assert [b.out_s for b in price.batches] == [20, 30, 50]
    assert [b.start_s for b in price.batches] == [0, 20, 50]
    assert price.duration_s == 100 and price.duration_max_s == 100 + 3 * 60
    # capacity: 5 serving, 4 while the canary is out, 3 during the batches of two, never below the floor of 3
    assert [n for _, n, _ in price.timeline] == [5, 4, 5, 3, 5, 3, 5]
    assert min(n for _, n, _ in price.timeline) >= price.min_serving == 3


def test_converged_hosts_never_leave_the_router_and_compile_time_counts() -> None:
    price = price_rollout(
        policy(), {"a": plan("a", converged=True), "b": plan("b", 40, build_s=600), "c": plan("c", 40)}
    )
    assert [b.hosts for b in price.batches] == [("b",), ("c",)]  # the canary a has nothing to do
    assert price.duration_s == 640 + 40


def test_bytes_come_from_the_hub_once_then_from_a_peer() -> None:
    price = price_rollout(policy(), {"a": plan("a", fetch=100), "b": plan("b", fetch=100), "c": plan("c", fetch=60)})
    assert [(t.host, t.source) for t in price.transfers] == [("a", HUB), ("b", "peer a"), ("c", "peer a")]
    assert (price.hub_bytes, price.peer_bytes) == (100, 160)
    held = price_rollout(policy(), {"a": plan("a", fetch=100), "b": plan("b"), "c": plan("c")})
    assert [(t.host, t.source) for t in held.transfers] == [("a", "peer b")]  # b already holds the files


def test_bytes_follow_the_rollout_order_and_a_host_of_the_same_batch_holds_nothing_yet() -> None:
    """As fleet apply moves them: the canary (here the last host of the inventory) is rolled first and fetches
    from the hub; a host rolled alongside it (the same batch) cannot take them from it; later hosts take them from
    the first host that holds them."""
    lacking = {h: plan(h, fetch=100) for h in "abc"}
    canary_last = price_rollout(policy(canary=("c",)), lacking)
    assert [(t.host, t.source) for t in canary_last.transfers] == [("c", HUB), ("a", "peer c"), ("b", "peer c")]
    together = price_rollout(policy(("a", "b", "c", "d"), ("a", "b"), 2), {**lacking, "d": plan("d", fetch=100)})
    assert [(t.host, t.source) for t in together.transfers] == [
        ("a", HUB),
        ("b", HUB),
        ("c", "peer a"),
        ("d", "peer a"),
    ]
    assert (together.hub_bytes, together.peer_bytes) == (200, 200)


def test_a_host_not_planned_is_not_counted_as_serving_and_an_unpriced_one_is_named() -> None:
    price = price_rollout(policy(), {"a": plan("a", downtime_s=None), "b": plan("b")})
    assert price.timeline[0][1] == 2 and price.unpriced == ("a",)


def _step(kind: str, action: str, cost: str = "", spec: dict | None = None) -> dict:
    return {
        "kind": kind,
        "action": action,
        "symbol": "+",
        "target": kind,
        "reason": "r",
        "cost": cost,
        "spec": spec or {},
    }


def test_a_plan_document_is_read_for_its_figures() -> None:
    files = [{"path": "q/a.gguf", "size": 3 << 30}, {"path": "q/b.gguf", "size": 1 << 30}]
    document = {
        "profile": "k3",
        "converged": False,
        "summary": "3 to add",
        "steps": [
            _step(
                "model",
                "create",
                "4 GiB to fetch",
                {
                    "repo": "org/K3",
                    "revision": "0123456789abcdef",
                    "quant": "UD-Q2_K_XL",
                    "endpoint": HUB,
                    "files": files,
                    "missing": ["q/a.gguf"],
                },
            ),
            _step("image", "create", "compile llama.cpp: ~12 min (the default)"),
            _step("container", "replace"),
            _step(
                "health", "read", "predicted downtime ~95 s (95 GiB at 1.0 GiB/s, measured here); gives up after 9 min"
            ),
        ],
    }
    read = read_host_plan("a", document)
    assert (read.fetch_bytes, read.build_s, read.downtime_s, read.relaunch) == (3 << 30, 720, 95, True)
    assert read.model == "org/K3@0123456789ab/UD-Q2_K_XL" and read.hub == HUB
    quiet = read_host_plan("a", {"converged": True, "summary": "no changes", "steps": [_step("health", "noop")]})
    assert quiet.converged and quiet.downtime_s == 0 and not quiet.relaunch


class FakeShell:
    """Answers by argv: what a host's ssh would return."""

    def __init__(self, version: str, plan_exit: int = 0, plan_out: str = "{}", reach: int = 0):
        self.version, self.plan_exit, self.plan_out, self.reach = version, plan_exit, plan_out, reach
        self.calls: list[tuple[Sequence[str], str | None]] = []

    def run(self, host: FleetHost, argv: Sequence[str], stdin: str | None, timeout_s: float) -> tuple[int, str, str]:
        self.calls.append((tuple(argv), stdin))
        if self.reach:
            return self.reach, "", "ssh: connect to host 10.0.0.9 port 22: Connection refused\n"
        if argv[-1] == "--version":
            return 0, f"kimik3 {self.version}\n", ""
        return self.plan_exit, self.plan_out, ""


def _host(name: str = "a") -> FleetHost:
    return FleetHost(
        name,
        "10.0.0.9",
        "ops",
        None,
        ("all",),
        {},
        {},  # type: ignore[arg-type]
        "name: k3\nserve: {port: 1}\n",
        None,
        ("/opt/k3/bin/kimik3",),
        "/srv",
    )


def test_ask_sends_the_profile_on_stdin_and_fixed_words_only() -> None:
    shell = FakeShell("1.0 (code x)", plan_out=json.dumps({"converged": True, "steps": []}))
    answer = ask(shell, _host(), ("plan",), "1.0 (code x)", 5)
    assert answer.ok and answer.document == {"converged": True, "steps": []}
    assert sorted(shell.calls, key=repr) == [  # both at once: in either order
        (("/opt/k3/bin/kimik3", "--version"), None),
        (("/opt/k3/bin/kimik3", "plan", "--json", "/dev/stdin"), "name: k3\nserve: {port: 1}\n"),
    ]


@pytest.mark.parametrize(
    "shell, problem, says",
    [
        (FakeShell("1.0 (code x)", reach=255), "unreachable", "a (ops@10.0.0.9) is unreachable over SSH: ssh: connect"),
        (FakeShell("1.0 (code x)", reach=127), "missing", "/opt/k3/bin/kimik3 is not installed there"),
        (FakeShell("0.9 (code y)"), "version", "a runs kimik3 0.9 (code y), not this kimik3 1.0 (code x)"),
        (
            FakeShell("1.0 (code x)", 6, json.dumps({"ok": False, "error": {"message": "hub down", "exit_code": 6}})),
            "refused",
            "a: kimik3 plan exited 6: hub down",
        ),
        (FakeShell("1.0 (code x)", 1, "Traceback ..."), "refused", "a: kimik3 plan exited 1"),
    ],
)
def test_a_host_that_cannot_answer_is_named_with_why(shell: FakeShell, problem: str, says: str) -> None:
    answer = ask(shell, _host(), ("plan",), "1.0 (code x)", 5)
    assert answer.problem == problem and says in answer.message and answer.document is None


def test_gather_keeps_the_hosts_order() -> None:
    hosts = [_host(n) for n in "abcdef"]
    assert [a.host for a in gather(hosts, lambda h: ask(FakeShell("v"), h, ("status",), "v", 5))] == list("abcdef")


def test_the_ssh_command_quotes_each_word_as_one() -> None:
    from kimik3_reconciler.adapters.ssh_shell import SshShell

    inventory_vars = {
        "ansible_ssh_private_key_file": "/keys/fleet key",
        "ansible_ssh_common_args": "-o 'UserKnownHostsFile=/k h' -o StrictHostKeyChecking=yes",
    }
    host = FleetHost("a", "10.0.0.9", "ops", 2222, (), inventory_vars, {}, "", None, (), "/")  # type: ignore[arg-type]
    argv = SshShell().command(host, ["/opt/k 3/kimik3", "plan", "--json", "/dev/stdin; rm -rf /"])
    # Ansible's connection vars become ssh's options, each one word (the inventory's, as Ansible passes them)
    assert argv[:-1] == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-i",
        "/keys/fleet key",
        "-o",
        "UserKnownHostsFile=/k h",
        "-o",
        "StrictHostKeyChecking=yes",
        "-p",
        "2222",
        "-l",
        "ops",
        "--",
        "10.0.0.9",
    ]
    assert argv[-1] == "'/opt/k 3/kimik3' plan --json '/dev/stdin; rm -rf /'"


def test_in_flight_is_the_engines_running_gauge_at_the_address_the_router_uses() -> None:
    from kimik3_reconciler.fleet.server_load import read_server, running_requests

    exposition = (
        "# HELP llamacpp:requests_processing Number of requests processing.\n"
        "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n"
        "llamacpp:requests_deferred 1\n"
    )
    assert running_requests(exposition, "llamacpp:requests_processing") == 3
    assert running_requests('vllm:num_requests_running{model_name="k3"} 2.0\n', "vllm:num_requests_running") == 2
    assert running_requests("", "llamacpp:requests_processing") is None

    class Serve:
        host, port = "10.231.0.12", 18181

    class Profile:
        serve, engine = Serve(), "llamacpp"

    asked = []
    host = FleetHost("b", "k3-b.example", None, None, (), {}, {}, "", Profile(), (), "/")  # type: ignore[arg-type]
    assert read_server(host, lambda url: (asked.append(url), (200, exposition))[1]).in_flight == 3
    assert asked == ["http://10.231.0.12:18181/metrics"]
    assert read_server(host, lambda url: (0, "ConnectionRefusedError")) is None


def test_a_hosts_steps_read_as_kimik3_plan_prints_them_escaped() -> None:
    step = {
        "kind": "container",
        "action": "replace",
        "symbol": "-/+",
        "target": "kimi-k3",
        "reason": "inputs moved",
        "diff": [{"field": "serve.ubatch", "old": 2048, "new": 4096}],
        "cost": "predicted downtime ~40 s",
        "warnings": ["\x1b[31mred"],
        "spec": {},
    }
    read = read_host_plan("a", {"converged": False, "summary": "1 to replace", "steps": [step]})
    assert read.changes == (
        "-/+ container kimi-k3",
        "      inputs moved",
        "        serve.ubatch: 2048 → 4096",
        "      cost: predicted downtime ~40 s",
        "      warning: \\x1b[31mred",
    )


@pytest.mark.parametrize(("hosts", "max_unavailable"), [(1, 1), (3, 1), (5, 2), (6, 3), (7, 2)])
def test_a_rollout_to_plan_never_waits_for_capacity(hosts: int, max_unavailable: int) -> None:
    """Each batch is back in rotation before the next leaves (cli/fleet_apply.py waits for it), and a batch is at
    most max_unavailable hosts: the others in rotation are never below the floor, so `_leaving` never waits."""
    names = tuple("abcdefg"[:hosts])
    price = price_rollout(policy(names, names[:1], max_unavailable), {h: plan(h) for h in names})
    assert price.batches and all(b.capacity_wait_s == 0 and b.serving >= price.min_serving for b in price.batches)
    assert price.duration_max_s == price.duration_s + len(price.batches) * 60


def test_a_batch_left_below_the_floor_by_a_host_not_planned_waits_the_drain_timeout() -> None:
    """c was not planned (counted as not serving): taking a out leaves 1 in rotation of a floor of 2, so fleet apply
    waits up to the drain timeout for the others' capacity (then refuses to take a out): priced in the longest
    duration; b's batch, after a is back, waits the same (c still out)."""
    price = price_rollout(policy(drain_s=60.0), {"a": plan("a"), "b": plan("b")})
    assert [(b.hosts, b.serving, b.capacity_wait_s) for b in price.batches] == [(("a",), 1, 60.0), (("b",), 1, 60.0)]
    assert price.min_serving == 2
    assert price.duration_s == 80 and price.duration_max_s == 80 + 2 * 60 + 2 * 60


def test_a_host_not_yet_in_the_router_is_never_waited_for() -> None:
    """A first rollout (each host's container to create, no server yet): `_leaving` finds the host in no rotation
    and takes it at once (cli/fleet_apply.py: "not in the router"), so a batch below the floor waits for nothing.
    Its plan reads so from `kimik3 plan --json`: the container step creates."""
    fresh = {"steps": [{"kind": "container", "action": "create", "cost": "predicted downtime ~40 s"}]}
    replaced = {"steps": [{"kind": "container", "action": "replace", "cost": "predicted downtime ~40 s"}]}
    assert read_host_plan("a", fresh).serving is False and read_host_plan("b", replaced).serving is True
    price = price_rollout(policy(drain_s=60.0), {"a": read_host_plan("a", fresh), "b": read_host_plan("b", replaced)})
    # c not planned: both batches leave 1 of a floor of 2; only b, in the router, waits for the others' capacity.
    assert [(b.hosts, b.capacity_wait_s) for b in price.batches] == [(("a",), 0.0), (("b",), 60.0)]
    assert price.duration_max_s == price.duration_s + 2 * 60 + 60
