"""`destroy` and the RPC workers' tensor caches (rpc.workers[].cache: rpc-server -c under a Docker volume on the worker,
`kimik3-rpc-cache-<profile>-<worker>`): named in the plan, kept unless `--model` (they hold the model's tensors the
rpc-server received, a copy of what the model cache holds, no user data), removed through the worker's own Docker; a
worker's cache_dir (its host's folder) named and never removed. On fakes: the observation of the volume, the plan,
the step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml
from support.fakes.docker import FakeDocker
from support.fakes.state import MemoryState
from support.observed import observed
from support.profiles import cpu_rpc_profile

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ContainerFact, RemovedWorkerFact, WorkerFact
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import DockerHost, WorkerRemove, WorkerVolumeRemove
from kimik3_reconciler.observe.workers import collect_removed_workers, collect_worker
from kimik3_reconciler.planning import plan_destroy, render_desired
from kimik3_reconciler.planning.worker_step import plan_removed_workers
from kimik3_reconciler.steps.report import NullReporter
from kimik3_reconciler.steps.workers import remember_workers, remove_worker_volume

W1 = DockerHost("w1", "ssh://k3@10.0.0.2")
W2 = DockerHost("w2", "tcp://10.0.0.3:2376", "/etc/k3/w2")
RUNNING = ContainerFact(id="w", name="k3-rpc-w1", state="running")


def profile(**w2: object):
    data = cpu_rpc_profile(
        {"name": "w1", "docker": W1.url, "bind": "10.0.0.2"},
        {"name": "w2", "docker": W2.url, "tls_dir": W2.tls_dir, "bind": "10.0.0.3", **w2},
    )
    return parse_profile(yaml.safe_dump(data), "p.yaml").profile


def worker_steps(plan) -> list[tuple[str, Action, str]]:  # noqa: ANN001 - model.plan.Plan
    return [(s.target, s.action, s.reason) for s in plan.steps if s.kind == "worker"]


def with_workers(p, *facts: WorkerFact, removed: tuple[RemovedWorkerFact, ...] = ()):  # noqa: ANN001, ANN201
    return observed(p).model_copy(update={"workers": facts, "removed_workers": removed})


def test_destroy_names_the_tensor_caches_it_keeps_and_how_to_remove_them() -> None:
    p = profile()
    obs = with_workers(
        p,
        WorkerFact(name="w1", docker=W1.url, container=RUNNING, cache_volume=True),
        WorkerFact(name="w2", docker=W2.url),  # no volume there (never launched, or removed by hand)
    )
    steps = worker_steps(plan_destroy(p, obs))
    assert [(target, action) for target, action, _ in steps] == [
        ("w1: k3-rpc-w1", Action.DELETE),
        ("w1: kimik3-rpc-cache-k3-w1", Action.NOOP),  # after its container: the container mounts it
        ("w2: k3-rpc-w2", Action.NOOP),
    ]
    reason = steps[1][2]
    assert reason.startswith("kept: its tensor cache") and "pass --model to remove" in reason
    assert "`docker volume rm kimik3-rpc-cache-k3-w1` through w1's Docker (ssh://k3@10.0.0.2)" in reason


def test_destroy_model_removes_them_through_each_workers_docker_the_dropped_ones_too() -> None:
    p = profile()
    dropped = RemovedWorkerFact(
        name="w3", docker="ssh://k3@10.0.0.4", container_name="k3-rpc-w3", cache_volume=True
    )  # a worker the profile no longer names: its container gone already, its volume left
    obs = with_workers(
        p, WorkerFact(name="w1", docker=W1.url, container=RUNNING, cache_volume=True), removed=(dropped,)
    )
    plan = plan_destroy(p, obs, model=True)
    removals = [s for s in plan.steps if isinstance(s.spec, WorkerVolumeRemove)]
    assert [(s.target, s.action, s.spec) for s in removals] == [
        (
            "w3: kimik3-rpc-cache-k3-w3",
            Action.DELETE,
            WorkerVolumeRemove(DockerHost("w3", "ssh://k3@10.0.0.4"), "kimik3-rpc-cache-k3-w3"),
        ),
        ("w1: kimik3-rpc-cache-k3-w1", Action.DELETE, WorkerVolumeRemove(W1, "kimik3-rpc-cache-k3-w1")),
    ]
    assert all(s.reason.startswith("--model: remove its tensor cache") for s in removals)


def test_a_cache_dir_is_the_worker_hosts_folder_and_never_removed() -> None:
    p = profile(cache_dir="/srv/rpc-cache")
    obs = with_workers(p, WorkerFact(name="w1", docker=W1.url), WorkerFact(name="w2", docker=W2.url))
    for model in (False, True):
        steps = worker_steps(plan_destroy(p, obs, model=model))
        (kept,) = [s for s in steps if s[0] == "w2: /srv/rpc-cache"]
        assert kept[1] is Action.NOOP and "kimik3 never removes it" in kept[2]
    no_cache = profile(cache=False)
    assert len(worker_steps(plan_destroy(no_cache, with_workers(no_cache)))) == 2  # the two containers' lines only


def test_observe_finds_the_volume_through_the_workers_docker() -> None:
    p = profile()
    w1, w3, state = FakeDocker(), FakeDocker(), MemoryState()
    w1.volumes["kimik3-rpc-cache-k3-w1"] = {"Name": "kimik3-rpc-cache-k3-w1"}
    host = SimpleNamespace(tcp_connect=lambda address, port: False)
    assert collect_worker(p, p.workers[0], w1, host, state, None, 0).cache_volume is True
    assert collect_worker(p, p.workers[1], FakeDocker(), host, state, None, 0).cache_volume is False
    remember_workers(state, "k3", ((DockerHost("w3", "ssh://k3@10.0.0.4"), "k3-rpc-w3"),))
    w3.volumes["kimik3-rpc-cache-k3-w3"] = {"Name": "kimik3-rpc-cache-k3-w3"}
    (dropped,) = collect_removed_workers(p, lambda _: w3, state)
    assert dropped.cache_volume is True and dropped.container is None


def test_the_step_removes_the_volume_on_the_worker() -> None:
    w1 = FakeDocker()
    w1.volumes["kimik3-rpc-cache-k3-w1"] = {"Name": "kimik3-rpc-cache-k3-w1"}
    ports = SimpleNamespace(worker_docker={W1: w1}.__getitem__)
    remove_worker_volume(WorkerVolumeRemove(W1, "kimik3-rpc-cache-k3-w1"), ports, NullReporter())
    assert w1.calls == ["volume rm kimik3-rpc-cache-k3-w1"] and w1.volumes == {}


DROPPED = RemovedWorkerFact(name="w3", docker="ssh://k3@10.0.0.4", container_name="k3-rpc-w3", cache_volume=True)


def test_a_dropped_workers_volume_is_named_as_the_last_chance_to_remove_it() -> None:
    """The run that removes a dropped worker's rpc-server forgets the worker (its state record entry): no later run
    sees its volume, so that run's line says so and how to remove it, by hand or (destroy) with --model now."""
    p = profile()
    obs = with_workers(p, removed=(DROPPED,))
    (kept,) = [s for s in plan_destroy(p, obs).steps if s.target == "w3: kimik3-rpc-cache-k3-w3"]
    assert kept.action is Action.NOOP and "no later run names it: pass --model to remove it now" in kept.reason
    assert "`docker volume rm kimik3-rpc-cache-k3-w3` through w3's Docker (ssh://k3@10.0.0.4)" in kept.reason


def test_the_apply_that_drops_a_worker_names_its_volume_and_removes_nothing_of_it() -> None:
    """In the removal's own line: apply prints the steps that change something, not a kept volume's."""
    p = profile()
    obs = with_workers(p, removed=(DROPPED,))
    (removal,) = plan_removed_workers(render_desired(p, obs), obs)
    assert removal.target == "w3: k3-rpc-w3" and removal.action is Action.DELETE
    assert removal.spec == WorkerRemove(DockerHost("w3", "ssh://k3@10.0.0.4"), "k3-rpc-w3", "k3")
    assert removal.reason.endswith(
        "; its tensor cache kimik3-rpc-cache-k3-w3 is kept, and no later run names it (kimik3 forgets w3 with its "
        "rpc-server): `docker volume rm kimik3-rpc-cache-k3-w3` through w3's Docker (ssh://k3@10.0.0.4)"
    )
    no_volume = with_workers(p, removed=(DROPPED.model_copy(update={"cache_volume": False}),))
    (plain,) = plan_removed_workers(render_desired(p, no_volume), no_volume)
    assert "tensor cache" not in plain.reason


def test_a_worker_whose_docker_does_not_answer_refuses_the_destroy_naming_the_way_on() -> None:
    p = profile()
    obs = with_workers(p, WorkerFact(name="w1", docker=W1.url, error="ssh: connect to host 10.0.0.2: refused"))
    with pytest.raises(PlanError) as refused:
        plan_destroy(p, obs, model=True)
    message = str(refused.value)
    assert message.startswith("rpc.workers w1: cannot reach its Docker at ssh://k3@10.0.0.2: ssh: connect")
    assert "destroy removes nothing until it answers" in message and "drop w1 from rpc.workers" in message
