"""A worker the profile no longer names (issue 18 follow-up): the record of launched workers, what observe
finds from it, the removal step (apply and destroy), and the refusal when that worker's Docker is unreachable."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml
from support.fakes.docker import FakeDocker
from support.fakes.state import MemoryState
from support.observed import observed
from support.profiles import cpu_rpc_profile

from kimik3_reconciler.errors import Kimik3Error, PlanError
from kimik3_reconciler.model.facts import ContainerFact, RemovedWorkerFact
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import rpc_workers_key
from kimik3_reconciler.model.specs import DockerHost, WorkerLaunch, WorkerRemove
from kimik3_reconciler.observe.workers import collect_removed_workers
from kimik3_reconciler.planning import plan_destroy, render_desired
from kimik3_reconciler.planning.worker_step import plan_removed_workers, render_worker
from kimik3_reconciler.steps.report import NullReporter
from kimik3_reconciler.steps.workers import launch_worker, remember_workers, remove_worker

PROFILE = cpu_rpc_profile(
    {"name": "w1", "docker": "ssh://k3@10.0.0.2", "bind": "10.0.0.2"},
    {"name": "w2", "docker": "tcp://10.0.0.3:2376", "tls_dir": "/etc/k3/w2", "bind": "10.0.0.3"},
)
W1 = DockerHost("w1", "ssh://k3@10.0.0.2")
W2 = DockerHost("w2", "tcp://10.0.0.3:2376", "/etc/k3/w2")


def profile(workers: int = 2):
    data = yaml.safe_load(yaml.safe_dump(PROFILE))
    data["rpc"]["workers"] = data["rpc"]["workers"][:workers]
    if not workers:
        del data["rpc"]
    return parse_profile(yaml.safe_dump(data), "p.yaml").profile


def test_a_launch_records_the_worker_and_a_removal_forgets_it() -> None:
    p = profile()
    state, dockers = MemoryState(), {W1: FakeDocker(), W2: FakeDocker()}
    ports = SimpleNamespace(state=state, worker_docker=dockers.__getitem__)
    desired = render_desired(p, observed(p))
    for worker, host in zip(p.workers, (W1, W2)):
        spec, _ = render_worker(p, worker, desired.build.tag, desired.build.fingerprint)
        launch_worker(WorkerLaunch(host, spec), ports, NullReporter())
    assert state.read(rpc_workers_key("k3")) == {
        "workers": [
            {"name": "w1", "docker": "ssh://k3@10.0.0.2", "tls_dir": None, "container": "k3-rpc-w1"},
            {"name": "w2", "docker": "tcp://10.0.0.3:2376", "tls_dir": "/etc/k3/w2", "container": "k3-rpc-w2"},
        ]
    }
    remember_workers(state, "k3", ((W1, "k3-rpc-w1"),))  # a converged apply: already recorded, nothing moves
    assert [e["name"] for e in state.read(rpc_workers_key("k3"))["workers"]] == ["w1", "w2"]
    remove_worker(WorkerRemove(W2, "k3-rpc-w2", "k3"), ports, NullReporter())
    assert "k3-rpc-w2" not in dockers[W2].containers and dockers[W2].calls[-1] == "rm k3-rpc-w2"
    assert [e["name"] for e in state.read(rpc_workers_key("k3"))["workers"]] == ["w1"]
    remove_worker(WorkerRemove(W1, "k3-rpc-w1", "k3"), ports, NullReporter())
    assert state.read(rpc_workers_key("k3")) is None  # the last one gone: no record left


def test_observe_finds_the_recorded_workers_the_profile_dropped_through_their_own_docker() -> None:
    state, w2 = MemoryState(), FakeDocker()
    remember_workers(state, "k3", ((W1, "k3-rpc-w1"), (W2, "k3-rpc-w2")))
    w2.containers["k3-rpc-w2"] = {
        "Id": "w" * 64,
        "Name": "/k3-rpc-w2",
        "State": {"Status": "running"},
        "Config": {"Labels": {}, "Image": "t"},
        "Image": "sha256:x",
    }
    opened: list[DockerHost] = []

    def workers(host: DockerHost) -> FakeDocker:
        opened.append(host)
        return w2

    assert collect_removed_workers(profile(2), workers, state) == ()  # both still named: nothing is opened
    assert opened == []
    (found,) = collect_removed_workers(profile(1), workers, state)
    assert opened == [W2]  # with its recorded TLS folder
    assert (found.name, found.docker, found.tls_dir, found.container_name) == (
        "w2",
        "tcp://10.0.0.3:2376",
        "/etc/k3/w2",
        "k3-rpc-w2",
    ) and found.container.state == "running"

    def unreachable(host: DockerHost) -> FakeDocker:
        raise Kimik3Error("ssh: connect to host 10.0.0.2 port 22: No route to host")

    gone = collect_removed_workers(profile(0), unreachable, state)  # the rpc section dropped: both are found
    assert [f.name for f in gone] == ["w1", "w2"] and all("No route to host" in f.error for f in gone)
    assert all(f.container is None for f in gone)


def removed(**changes: object) -> RemovedWorkerFact:
    fields = {
        "name": "w2",
        "docker": "tcp://10.0.0.3:2376",
        "tls_dir": "/etc/k3/w2",
        "container_name": "k3-rpc-w2",
        "container": ContainerFact(id="w", name="k3-rpc-w2", state="running"),
    }
    return RemovedWorkerFact(**{**fields, **changes})


def test_a_dropped_worker_is_removed_and_an_unreachable_one_refused_with_the_hand_clean_up() -> None:
    p = profile(1)
    obs = observed(p).model_copy(update={"removed_workers": (removed(),)})
    (step,) = plan_removed_workers(render_desired(p, obs), obs)
    assert step.action is Action.DELETE and step.spec == WorkerRemove(W2, "k3-rpc-w2", "k3") and step.host == "w2"
    blind = obs.model_copy(update={"removed_workers": (removed(container=None, error="TLS handshake failed"),)})
    with pytest.raises(PlanError) as refused:
        plan_removed_workers(render_desired(p, blind), blind)
    message = str(refused.value)
    assert "rpc.workers w2: the profile no longer names this worker" in message
    assert "tcp://10.0.0.3:2376: TLS handshake failed" in message and "docker rm -f k3-rpc-w2" in message
    assert rpc_workers_key("k3") in message


def test_destroy_removes_the_named_workers_and_the_recorded_ones_the_profile_dropped() -> None:
    p = profile(0)
    obs = observed(p).model_copy(update={"removed_workers": (removed(),)})
    workers = [s for s in plan_destroy(p, obs).steps if s.kind == "worker"]
    assert [(s.target, s.action) for s in workers] == [("w2: k3-rpc-w2", Action.DELETE)]


def test_an_apply_records_its_workers_and_the_next_one_without_them_removes_them(tmp_path) -> None:
    """End to end on fakes: converge with a worker, then drop the rpc section: its rpc-server goes, the record too."""
    from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

    from kimik3_reconciler.orchestrator import Orchestrator

    class WorkerDocker(FakeDocker):
        def info(self) -> dict[str, object]:
            return {"ID": "worker-daemon"}

        def exec_output(self, name: str, argv: list[str]) -> str:
            return ""

    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    hub = FakeHub(
        "org/k3", FAKE_REVISION, {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard" * 10}, tmp_path / "hub"
    )
    ports, _ = fake_ports(hub)
    worker = WorkerDocker()
    ports.worker_docker = lambda host: worker
    ports.host.tcp_connect = lambda address, port, timeout_s=2.0: True
    orchestrator = Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    with_rpc = FAKE_PROFILE + "rpc: {workers: [{name: w1, docker: 'ssh://k3@10.0.0.2', bind: 10.0.0.2}]}\n"
    orchestrator.apply_or_revert(parse_profile(with_rpc, "test.yaml"))
    assert "k3-test-rpc-w1" in worker.containers
    assert [e["container"] for e in ports.state.read(rpc_workers_key("k3-test"))["workers"]] == ["k3-test-rpc-w1"]
    result = orchestrator.apply_or_revert(parse_profile(FAKE_PROFILE, "test.yaml"))
    assert ("worker", Action.DELETE) in [(s.kind, s.action) for s in result.executed]
    assert "k3-test-rpc-w1" not in worker.containers and ports.state.read(rpc_workers_key("k3-test")) is None
    assert result.final.converged


def test_a_worker_whose_docker_url_moved_on_the_same_daemon_is_not_removed() -> None:
    """ssh:// → tcp:// of one host: the recorded entry names the container the profile still runs there."""

    class Daemon(FakeDocker):
        def __init__(self, daemon_id: str) -> None:
            super().__init__()
            self.daemon_id = daemon_id

        def info(self) -> dict[str, object]:
            return {"ID": self.daemon_id}

    state = MemoryState()
    remember_workers(state, "k3", ((DockerHost("w2", "ssh://k3@10.0.0.3"), "k3-rpc-w2"),))
    same = {"ssh://k3@10.0.0.3": Daemon("B"), "tcp://10.0.0.3:2376": Daemon("B")}
    assert collect_removed_workers(profile(2), lambda host: same[host.url], state) == ()
    moved = {"ssh://k3@10.0.0.3": Daemon("C"), "tcp://10.0.0.3:2376": Daemon("B")}
    (found,) = collect_removed_workers(profile(2), lambda host: moved[host.url], state)
    assert (found.docker, found.container_name, found.container) == ("ssh://k3@10.0.0.3", "k3-rpc-w2", None)
    remember_workers(state, "k3", ((W2, "k3-rpc-w2"),), converged=True)  # converged: the old URL's entry goes
    assert state.read(rpc_workers_key("k3"))["workers"] == [
        {"name": "w2", "docker": "tcp://10.0.0.3:2376", "tls_dir": "/etc/k3/w2", "container": "k3-rpc-w2"}
    ]
