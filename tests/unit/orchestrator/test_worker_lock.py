"""The apply lock on RPC worker and cluster node hosts: which hosts a change locks (the profile's workers and
nodes and the recorded ones it dropped, once per Docker), how each is named (a worker, a node by its field) in
LockHeld, lock-wait and `force-unlock` (on fakes of the worker lock; this host's lock is the real flock adapter on a
temp dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from support.fakes import FAKE_PROFILE, FakeClock, FakeHub, fake_ports
from support.fakes.lock import FakeWorkerLocks

from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.errors import InputError, LockHeld, PlanError
from kimik3_reconciler.event_text import event_line
from kimik3_reconciler.locking import OtherHost, force_unlock, new_holder
from kimik3_reconciler.model.host_lock import LockHolder, worker_unlock_by_hand
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import cluster_members_key, rpc_workers_key
from kimik3_reconciler.model.specs import DockerHost
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter
from kimik3_reconciler.steps.workers import remember_workers

W1 = DockerHost("w1", "ssh://k3@10.0.0.2")
W2 = DockerHost("w2", "tcp://10.0.0.3:2376", "/etc/k3/w2")
W3 = DockerHost("w3", "ssh://k3@10.0.0.2")  # a second rpc-server on w1's host (another port)


def profile(*workers: DockerHost):
    data = yaml.safe_load(FAKE_PROFILE)
    if workers:
        data["rpc"] = {
            "workers": [
                {
                    "name": w.name,
                    "docker": w.url,
                    "bind": "10.0.0.2",
                    "port": 50052 + i,
                    **({"tls_dir": w.tls_dir} if w.tls_dir else {}),
                }
                for i, w in enumerate(workers)
            ]
        }
    return parse_profile(yaml.safe_dump(data), "p.yaml").profile


def orchestrator(tmp_path: Path, locks: FakeWorkerLocks) -> Orchestrator:
    ports, _ = fake_ports(FakeHub("org/k3", "ab" * 20, {}, tmp_path / "hub"))
    ports.lock, ports.worker_lock = StateDirLock(tmp_path / "state"), locks
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")


def foreign(lock_id: str = "0123456789ab") -> LockHolder:
    """A holder on another main host sharing the worker: its pid means nothing here."""
    return LockHolder(
        id=lock_id, operation="apply", profile="k3-test", pid=4242, host="gpu-07", started="2026-12-03T04:24:03+00:00"
    )


def test_an_apply_locks_the_named_workers_then_the_dropped_ones_once_per_docker(tmp_path: Path) -> None:
    locks = FakeWorkerLocks()
    e = orchestrator(tmp_path, locks)
    remember_workers(e.ports.state, "k3-test", ((W1, "k3-test-rpc-w1"), (W2, "k3-test-rpc-w2")))
    with e.locked("apply", profile(W1, W3), timeout_s=0) as holder:
        # w2 was dropped from the profile: this apply removes its rpc-server there, so it holds w2's host too.
        assert locks.taken == [W1.url, W2.url]  # w3 shares w1's Docker: one lock container there
        assert locks.records == {W1.url: holder, W2.url: holder}
    assert locks.records == {}  # released on the way out


def test_a_worker_held_by_another_main_host_is_exit_5_naming_the_worker_and_the_profile_file(tmp_path: Path) -> None:
    locks = FakeWorkerLocks()
    locks.records[W1.url] = foreign()
    e = orchestrator(tmp_path, locks)
    with pytest.raises(LockHeld) as held, e.locked("apply", profile(W1), timeout_s=0):
        pytest.fail("the block ran without the worker's lock")
    message = str(held.value)
    assert message.startswith(f"rpc worker w1 ({W1.url}) is locked by another kimik3: apply of k3-test by pid 4242")
    assert "kimik3 force-unlock 0123456789ab FILE" in message and held.value.lock_id == "0123456789ab"
    assert StateDirLock(tmp_path / "state").holder() == (None, False)  # this host's lock was let go


def test_an_unreachable_dropped_worker_refuses_before_anything_with_the_hand_clean_up(tmp_path: Path) -> None:
    locks = FakeWorkerLocks(down=(W2.url,))
    e = orchestrator(tmp_path, locks)
    remember_workers(e.ports.state, "k3-test", ((W2, "k3-test-rpc-w2"),))
    with pytest.raises(PlanError) as refused, e.locked("apply", profile(), timeout_s=0):
        pytest.fail("the block ran without the dropped worker's lock")
    message = str(refused.value)
    assert f"rpc worker w2: cannot take the apply lock in its Docker at {W2.url}: ssh: connect" in message
    assert "the profile no longer names this worker" in message and rpc_workers_key("k3-test") in message
    assert refused.value.exit_code == 3 and locks.records == {}


def test_force_unlock_removes_the_id_here_and_on_each_worker_that_has_it(tmp_path: Path) -> None:
    hung = new_holder("apply", "k3-test", FakeClock())
    StateDirLock(tmp_path / "state").try_acquire(hung)
    locks = FakeWorkerLocks()
    locks.records |= {W1.url: hung, W2.url: foreign("fedcba987654")}
    e = orchestrator(tmp_path, locks)
    said = e.force_unlock(hung.id, profile(W1, W2))
    assert f"removed lock {hung.id} (apply of k3-test by pid {os.getpid()}" in said
    assert f"removed lock {hung.id} on rpc worker w1 ({W1.url})" in said
    assert locks.records == {W2.url: foreign("fedcba987654")}  # another run's lock there is not this id's
    assert StateDirLock(tmp_path / "state").holder()[0] is None


def test_force_unlock_of_a_lock_left_on_a_worker_by_another_main_host(tmp_path: Path) -> None:
    locks = FakeWorkerLocks()
    locks.records[W2.url] = foreign()
    e = orchestrator(tmp_path, locks)
    with pytest.raises(InputError, match="kimik3 force-unlock ID FILE"):  # this host alone does not have it
        e.force_unlock("0123456789ab", None)
    said = e.force_unlock("0123456789ab", profile(W2))
    assert said == (
        f"removed lock 0123456789ab on rpc worker w2 ({W2.url}) (apply of k3-test by pid 4242 on gpu-07 "
        "since 2026-12-03T04:24:03+00:00 (lock id 0123456789ab))"
    )
    assert locks.records == {}
    with pytest.raises(InputError) as again:  # gone everywhere now; the file was given, so no hint to give it
        e.force_unlock("0123456789ab", profile(W2))
    assert str(again.value) == "no lock 0123456789ab: the host is not locked"


def test_force_unlock_without_the_file_reaches_the_recorded_workers_of_the_profile_the_lock_names(
    tmp_path: Path,
) -> None:
    hung = new_holder("apply", "k3-test", FakeClock())
    StateDirLock(tmp_path / "state").try_acquire(hung)
    locks = FakeWorkerLocks()
    locks.records[W1.url] = hung
    e = orchestrator(tmp_path, locks)
    remember_workers(e.ports.state, "k3-test", ((W1, "k3-test-rpc-w1"),))
    assert f"on rpc worker w1 ({W1.url})" in e.force_unlock(hung.id, None)
    assert locks.records == {}


def test_force_unlock_names_the_command_for_a_worker_it_cannot_reach(tmp_path: Path) -> None:
    hung = new_holder("apply", "k3-test", FakeClock())
    StateDirLock(tmp_path / "state").try_acquire(hung)
    e = orchestrator(tmp_path, FakeWorkerLocks(down=(W2.url,)))
    said = e.force_unlock(hung.id, profile(W2))
    assert f"removed lock {hung.id} (" in said
    assert f"rpc worker w2: cannot reach its Docker at {W2.url}" in said
    assert worker_unlock_by_hand(W2, hung.id) in said
    with pytest.raises(InputError) as nothing:  # found nowhere: the unreachable worker's command is the way
        orchestrator(tmp_path / "other", FakeWorkerLocks(down=(W2.url,))).force_unlock(hung.id, profile(W2))
    assert worker_unlock_by_hand(W2, hung.id) in str(nothing.value)


def test_the_hand_commands_reach_the_worker_as_kimik3_does() -> None:
    assert worker_unlock_by_hand(W1, "abc") == (
        "check that `docker -H ssh://k3@10.0.0.2 inspect --format '{{index .Config.Labels \"kimik3.lock.holder\"}}' "
        "kimik3-host-lock` names lock id abc, then `docker -H ssh://k3@10.0.0.2 rm kimik3-host-lock`"
    )
    tls = (
        "docker -H tcp://10.0.0.3:2376 --tlsverify --tlscacert /etc/k3/w2/ca.pem --tlscert /etc/k3/w2/cert.pem "
        "--tlskey /etc/k3/w2/key.pem"
    )
    assert f"then `{tls} rm kimik3-host-lock`" in worker_unlock_by_hand(W2, "abc")


def test_force_unlock_still_refuses_an_id_that_is_nowhere(tmp_path: Path) -> None:
    locks = FakeWorkerLocks()
    locks.records[W1.url] = foreign()
    with pytest.raises(InputError) as refused:
        force_unlock(StateDirLock(tmp_path), "ffffffffffff", [(OtherHost(W1), locks(W1))])
    assert "no lock ffffffffffff: the host is not locked" in str(refused.value)
    assert "rpc worker w1: apply of k3-test by pid 4242 on gpu-07" in str(refused.value)
    assert locks.records == {W1.url: foreign()}


def cluster_profile():
    """Two nodes over ssh (vllm.cluster): the plan cases' base profile with a second node."""
    data = yaml.safe_load((Path(__file__).parents[2] / "cases/plan/_base-vllm-cluster.yaml").read_text())
    data["vllm"]["pipeline_parallel_size"] = 3
    data["vllm"]["cluster"]["nodes"].append({"name": "gpu3", "docker": "ssh://kimik3@10.0.0.3", "bind": "10.0.0.3"})
    return parse_profile(yaml.safe_dump(data), "p.yaml").profile


def test_an_apply_locks_each_cluster_node_and_an_unreachable_one_is_refused_by_its_field(tmp_path: Path) -> None:
    locks = FakeWorkerLocks(down=("ssh://kimik3@10.0.0.3",))
    e = orchestrator(tmp_path, locks)
    with pytest.raises(PlanError) as refused, e.locked("apply", cluster_profile(), timeout_s=0):
        pytest.fail("the block ran without the node's lock")
    message = str(refused.value)
    assert message.startswith(
        "cluster node gpu3 (vllm.cluster.nodes[1].docker): cannot take the apply lock in its Docker at "
        "ssh://kimik3@10.0.0.3: ssh: connect"
    )
    assert "rpc worker" not in message and "no longer names" not in message
    assert locks.taken == ["ssh://kimik3@10.0.0.2"] and locks.records == {}  # gpu2's was let go
    assert refused.value.exit_code == 3


def test_a_cluster_node_held_by_another_kimik3_is_named_as_a_node_by_its_field(tmp_path: Path) -> None:
    locks = FakeWorkerLocks()
    locks.records["ssh://kimik3@10.0.0.2"] = foreign()
    e = orchestrator(tmp_path, locks)
    with pytest.raises(LockHeld) as held, e.locked("apply", cluster_profile(), timeout_s=0):
        pytest.fail("the block ran without the node's lock")
    assert str(held.value).startswith(
        "cluster node gpu2 (vllm.cluster.nodes[0].docker, ssh://kimik3@10.0.0.2) is locked by another kimik3"
    )
    assert "rpc worker" not in str(held.value)


def test_a_wait_for_a_cluster_node_says_node_and_its_field(tmp_path: Path) -> None:
    locks = FakeWorkerLocks()
    locks.records["ssh://kimik3@10.0.0.3"] = foreign()
    e = orchestrator(tmp_path, locks)
    said: list[tuple[str, dict]] = []
    e.reporter.event = lambda name, **fields: said.append((name, fields))
    with pytest.raises(LockHeld), e.locked("apply", cluster_profile(), timeout_s=0.5):
        pytest.fail("the block ran without the node's lock")
    waits = [fields for name, fields in said if name == "lock-wait"]
    assert waits and waits[0]["node"] == "gpu3" and waits[0]["field"] == "vllm.cluster.nodes[1].docker"
    assert "worker" not in waits[0]
    assert event_line("lock-wait", waits[0]).startswith(
        "waiting for the host lock on cluster node gpu3 (vllm.cluster.nodes[1].docker), held by apply of k3-test"
    )


def test_force_unlock_with_the_file_names_a_cluster_node_by_its_field(tmp_path: Path) -> None:
    hung = new_holder("apply", "k3-test", FakeClock())
    StateDirLock(tmp_path / "state").try_acquire(hung)
    locks = FakeWorkerLocks(down=("ssh://kimik3@10.0.0.3",))
    locks.records["ssh://kimik3@10.0.0.2"] = hung
    said = orchestrator(tmp_path, locks).force_unlock(hung.id, cluster_profile())
    assert f"removed lock {hung.id} on cluster node gpu2 (vllm.cluster.nodes[0].docker, ssh://kimik3@10.0.0.2)" in said
    assert "cluster node gpu3 (vllm.cluster.nodes[1].docker): cannot reach its Docker at ssh://kimik3@10.0.0.3" in said
    assert "rpc worker" not in said


def test_force_unlock_without_the_file_reaches_the_recorded_cluster_members_too(tmp_path: Path) -> None:
    hung = new_holder("apply", "k3-test", FakeClock())
    StateDirLock(tmp_path / "state").try_acquire(hung)
    locks = FakeWorkerLocks()
    node = DockerHost("gpu2", "ssh://kimik3@10.0.0.2")
    locks.records[node.url] = hung
    e = orchestrator(tmp_path, locks)
    remember_workers(e.ports.state, "k3-test", ((node, "k3-test-node-gpu2"),), key=cluster_members_key("k3-test"))
    assert f"removed lock {hung.id} on cluster node gpu2 ({node.url})" in e.force_unlock(hung.id, None)
    assert locks.records == {}


def test_two_runs_sharing_two_hosts_lock_them_in_one_order_whatever_their_profiles_say(tmp_path: Path) -> None:
    """Two main hosts, one profile listing w2 then w1, the other w1 then w2 (or w2 dropped while a node runs on
    w1's Docker): in the profiles' order each would hold one host and wait on the other until both timed out."""
    orders = []
    for i, workers in enumerate(((W2, W1), (W1, W2))):
        locks = FakeWorkerLocks()
        with orchestrator(tmp_path / str(i), locks).locked("apply", profile(*workers), timeout_s=0):
            orders.append(locks.taken)
    assert orders[0] == orders[1] == sorted([W1.url, W2.url])

    node = DockerHost("gpu2", "ssh://kimik3@10.0.0.2")  # the cluster profile's first node
    locks = FakeWorkerLocks()
    e = orchestrator(tmp_path / "dropped", locks)
    dropped = DockerHost("w0", "ssh://kimik3@10.0.0.1")  # a dropped worker sorts before the named node
    remember_workers(e.ports.state, "kimi-k3", ((dropped, "kimi-k3-rpc-w0"),))
    with e.locked("apply", cluster_profile(), timeout_s=0):
        assert locks.taken == [dropped.url, node.url, "ssh://kimik3@10.0.0.3"]
