"""RPC workers (issue 18), pure parts: the worker's rendered rpc-server, the main server's --rpc, the plan
grouped by host, the memory the workers add to the sizing gate, and verify's rpc check on recorded text."""

from __future__ import annotations

import yaml
from support.observed import GIB, observed
from support.profiles import cpu_rpc_profile

from kimik3_reconciler.engines.llamacpp.memory_gate import memory_findings
from kimik3_reconciler.model.facts import ContainerFact, HostFacts, RpcDeviceFact, WorkerFact
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.workers import parse_rpc_devices
from kimik3_reconciler.planning import plan, render_desired
from kimik3_reconciler.planning.worker_step import render_worker
from kimik3_reconciler.verify.report import Status
from kimik3_reconciler.verify.workers import check_workers, rpc_buffers

PROFILE = cpu_rpc_profile({"name": "w1", "docker": "ssh://k3@10.0.0.2", "bind": "10.0.0.2", "threads": 8})
# tools/rpc/rpc-server.cpp's start-up banner, as `docker logs` shows it (stdout line-buffered by stdbuf)
WORKER_LOG = """Starting RPC server v3.0.0
  endpoint       : 10.0.0.2:50052
  local cache    : /rpc-cache/rpc
Devices:
  CPU: AMD EPYC 9654 96-Core Processor (515890 MiB, 500001 MiB free)
"""
# llama-server's load at --log-verbosity 4 (the lines verify reads)
SERVER_LOG = """0.00.286 I load_tensors:   CPU_Mapped model buffer size =     1.15 MiB
0.00.288 I load_tensors: RPC0[10.0.0.2:50052] model buffer size =     3.40 MiB
"""


def profile(**worker: object):  # noqa: ANN201 - a Profile
    data = yaml.safe_load(yaml.safe_dump(PROFILE))
    data["rpc"]["workers"][0].update(worker)
    return parse_profile(yaml.safe_dump(data), "p.yaml").profile


def worker_fact(p, **changes: object) -> WorkerFact:  # noqa: ANN001
    desired = render_desired(p, observed(p))
    spec, digest = render_worker(p, p.workers[0], desired.build.tag, desired.build.fingerprint)
    fields = {
        "name": "w1",
        "docker": "ssh://k3@10.0.0.2",
        "port_open": True,
        "listeners": ("10.0.0.2",),
        "container": ContainerFact(id="w", name=spec.name, state="running", fingerprint=digest),
        "devices": parse_rpc_devices(WORKER_LOG),
        "mem_total": 512 * GIB,
    }
    return WorkerFact(**{**fields, **changes})


def test_the_worker_runs_rpc_server_bound_to_its_address_with_the_tensor_cache() -> None:
    p = profile()
    desired = render_desired(p, observed(p))
    spec, _ = render_worker(p, p.workers[0], desired.build.tag, desired.build.fingerprint)
    assert spec.name == "k3-rpc-w1" and spec.image == desired.build.tag  # the same image as the main server
    assert spec.entrypoint == ("stdbuf", "-oL", "/app/ggml-rpc-server")
    assert spec.command == ("-H", "10.0.0.2", "-p", "50052", "-t", "8", "-c")
    assert dict(spec.env) == {"LLAMA_CACHE": "/rpc-cache"} and spec.volumes == (
        ("kimik3-rpc-cache-k3-w1", "/rpc-cache"),
    )
    assert spec.network_mode == "host"  # it binds the worker's own address; nothing is published
    uncached, _ = render_worker(profile(cache=False), profile(cache=False).workers[0], "t", "f")
    assert "-c" not in uncached.command and uncached.volumes == () and uncached.env == ()


def test_the_main_server_gets_rpc_and_its_fingerprint_follows_the_worker() -> None:
    p = profile()
    launch = render_desired(p, observed(p)).launch
    argv = launch.spec.command
    assert argv[argv.index("--rpc") + 1] == "10.0.0.2:50052"
    moved = profile(threads=16)
    assert render_desired(moved, observed(moved)).launch.fingerprint != launch.fingerprint


def test_the_plan_groups_steps_by_host_with_the_bytes_each_is_sent() -> None:
    p = profile()
    fresh = WorkerFact(name="w1", docker="ssh://k3@10.0.0.2", context_bytes=30 << 20, mem_total=64 * GIB)
    result = plan(p, observed(p, workers=(fresh,)))
    hosts = result.hosts()
    assert list(hosts) == ["this host", "w1"]
    assert hosts["w1"]["ships_bytes"] == 30 << 20 and hosts["this host"]["ships_bytes"] == 0
    assert hosts["w1"]["steps"] == [
        "worker image w1: " + render_desired(p, observed(p)).build.tag,
        "worker w1: k3-rpc-w1",
        "worker health w1: 10.0.0.2:50052",
    ]
    order = [s.kind for s in result.steps]
    assert order.index("worker health") < order.index("container")  # workers listen first


def test_the_sizing_gate_counts_the_workers_memory() -> None:
    p = profile()
    # 48 GiB: the server keeps the prompt cache (8 GiB) and its 8 slots' context checkpoints (36.9 GiB) here
    host = HostFacts(physical_cores=8, ram_total=48 * GIB, ram_available=48 * GIB)
    big = observed(p, host=host)
    big = big.model_copy(
        update={
            "model": big.model.model_copy(
                update={"files": tuple(f.model_copy(update={"size": 40 * GIB}) for f in big.model.files)}
            )
        }
    )
    refusals, _ = memory_findings(p, big, ours_running=False)
    assert refusals and "cannot run at any split" in refusals[0]
    with_worker = big.model_copy(update={"workers": (worker_fact(p),)})
    assert memory_findings(p, with_worker, ours_running=False) == ([], [])


def test_verify_reads_the_rpc_buffers_and_the_worker_listeners() -> None:
    p = profile()
    assert rpc_buffers(SERVER_LOG) == {"10.0.0.2:50052": 3.40}
    assert parse_rpc_devices(WORKER_LOG) == (
        RpcDeviceFact(name="CPU", description="AMD EPYC 9654 96-Core Processor", total=515890 << 20, free=500001 << 20),
    )
    ok = observed(p, workers=(worker_fact(p),))
    status, detail = check_workers(p, ok, SERVER_LOG)
    assert status is Status.OK and "w1 (10.0.0.2:50052) holds 3.40 MiB" in detail
    status, detail = check_workers(p, ok, SERVER_LOG.splitlines()[0])
    assert status is Status.FAILED and "no model buffer on RPC device 10.0.0.2:50052" in detail
    leaky = observed(p, workers=(worker_fact(p, listeners=("0.0.0.0",)),))
    status, detail = check_workers(p, leaky, SERVER_LOG)
    assert status is Status.FAILED and "bound at 0.0.0.0, the profile names only 10.0.0.2" in detail


def test_a_tcp_worker_docker_needs_its_tls_client_certificate(tmp_path) -> None:  # noqa: ANN001
    import pytest

    from kimik3_reconciler.adapters.docker_engine import remote_engine
    from kimik3_reconciler.errors import PermanentError

    with pytest.raises(PermanentError, match="never plain tcp"):
        remote_engine("tcp://10.0.0.3:2376")
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("x")
    engine = remote_engine("tcp://10.0.0.3:2376", tmp_path)
    assert (
        engine._tls.verify is True
        and engine._tls.ca_cert == str(tmp_path / "ca.pem")
        and engine._tls.cert == (str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    )
    assert remote_engine("ssh://k3@10.0.0.2")._tls is None  # ssh: the ssh client's keys, no TLS


def test_the_worker_host_sockets_name_its_listener_and_the_connected_main_server() -> None:
    from kimik3_reconciler.observe.host import parse_tcp_clients, parse_tcp_listeners

    # /proc/net/tcp of a worker: rpc-server listening on 127.0.0.2:19311 (0x4B6F), the main server connected
    tables = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0200007F:4B6F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1
   1: 0200007F:4B6F 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 4243 1
   2: 0100007F:A1B2 0200007F:4B6F 01 00000000:00000000 00:00000000 00000000     0        0 4244 1
"""
    assert parse_tcp_listeners(tables, 19311) == {4242: "127.0.0.2"}
    assert parse_tcp_clients(tables, 19311) == ("127.0.0.1",)


def test_a_launch_points_a_moved_tag_back_at_its_own_build() -> None:
    """Two profiles of one pin with other patches share the tag on one daemon; each apply re-tags its build.
    A launch right after the other one's re-tag would run the wrong image: the tag is pinned first."""
    from support.fakes.docker import FakeDocker

    from kimik3_reconciler.model.labels import IMAGE_FINGERPRINT
    from kimik3_reconciler.steps.image import pin_tag
    from kimik3_reconciler.steps.report import NullReporter

    docker = FakeDocker()
    docker.images = {
        "sha256:ours": {"Id": "sha256:ours", "RepoTags": [], "Config": {"Labels": {IMAGE_FINGERPRINT: "fp-ours"}}},
        "sha256:theirs": {
            "Id": "sha256:theirs",
            "RepoTags": ["k3:tag"],
            "Config": {"Labels": {IMAGE_FINGERPRINT: "fp-theirs"}},
        },
    }
    pin_tag(docker, "k3:tag", "fp-ours", NullReporter())
    assert docker.images["sha256:ours"]["RepoTags"] == ["k3:tag"] and docker.images["sha256:theirs"]["RepoTags"] == []
    docker.calls.clear()
    pin_tag(docker, "k3:tag", "fp-ours", NullReporter())  # already ours: nothing to do
    assert docker.calls == []
