"""Faults on in-memory fakes: a failed launch is stopped and its cause named, an interrupted health wait is
verified by the next apply, a foreign listener on the port is a host-gate refusal, a revert resolves the
last good profile's paths against its own folder, and `enable: false` installs."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fakes import FakeHub, fake_ports
from test_orchestrator import FILES, PROFILE, REV, load, verify_failing, world  # noqa: F401 - `world` is a fixture

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import LoadFailed, PermanentError, PlanError, VerifyFailed
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import unverified_key
from kimik3_reconciler.observe.host import collect_listeners, parse_cgroup_container, parse_tcp_listeners
from kimik3_reconciler.observe.server_log import classify_load_failure
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter

FIXTURES = Path(__file__).parents[2] / "fixtures" / "host"
TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def listening(port: int, inode: int, address: str = "0100007F") -> str:
    """One /proc/net/tcp row: `address` (host-order hex) listening on `port`, socket `inode`."""
    return (
        f"   0: {address}:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 {inode} 1 0 100 0\n"
    )


BIND_LOG = (
    "srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 18999\n"
    "srv  llama_server: exiting due to HTTP server error\n"
)
GGUF_LOG = (
    "gguf_init_from_file_impl: failed to read tensor data\nllama_model_load: error loading model\n"
    "srv    load_model: failed to load model, '/models/x.gguf'\n"
    "srv  llama_server: exiting due to model loading error\n"
)


# the cause of a failed launch, from its log --------------------------------------------------------


@pytest.mark.parametrize(
    ("exit_code", "oom_killed", "log", "cause"),
    [
        (1, False, BIND_LOG, "bind"),
        (1, False, "bind(): Address already in use\n", "bind"),
        (137, False, "load_tensors: loading model tensors\n", "killed"),  # SIGKILL is not OOM unless Docker says so
        (143, False, "", "killed"),
        (137, True, "load_tensors: loading model tensors\n", "oom"),  # State.OOMKilled
        (1, True, "", "oom"),
        (
            1,
            False,
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000 MiB: cudaMalloc failed: out of memory\n"
            + GGUF_LOG,
            "oom",
        ),
        (1, False, "gguf_init_from_file_impl: invalid magic characters: 'abcd'\n", "bad-gguf"),
        (1, False, GGUF_LOG, "bad-gguf"),
        (1, False, "something else entirely\n", "other"),
    ],
)
def test_the_cause_is_read_from_the_exit_and_the_log(exit_code, oom_killed, log, cause) -> None:
    assert classify_load_failure(exit_code, oom_killed, log, engine_for("llamacpp").log_signs).cause == cause


def test_a_bind_failure_is_not_called_a_model_load_failure() -> None:
    headline = classify_load_failure(1, False, BIND_LOG, engine_for("llamacpp").log_signs).headline
    assert "could not bind its port" in headline and "loading the model" not in headline


# a failed launch is stopped, named, and the next plan starts it like any stopped container ----------


def test_a_failed_launch_is_stopped_with_its_cause_and_log_tail(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    docker.crash_on_start, docker.logs = True, BIND_LOG
    with pytest.raises(LoadFailed) as failed:
        orchestrator.apply(load())
    message = str(failed.value)
    assert (
        message.startswith("container k3-test could not bind its port")
        and "[bind: exited, exit code 1, stopped]" in message
    )
    assert "couldn't bind HTTP server socket" in failed.value.log_tail
    assert docker.calls[-2:] == ["run k3-test", "stop k3-test"]  # no crash loop under unless-stopped
    plan = orchestrator.plan(load())
    assert [(s.kind, s.action) for s in plan.changes] == [("container", Action.UPDATE), ("health", Action.READ)]
    assert "start it" in plan.changes[0].reason


def test_a_crash_looping_container_is_stopped_too(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    real_run = docker.run_container

    def restarting(spec):  # the restart policy is between two tries
        cid = real_run(spec)
        docker.containers[spec.name]["State"].update(Status="restarting", Restarting=True, ExitCode=1)
        return cid

    docker.run_container, docker.logs = restarting, GGUF_LOG
    with pytest.raises(LoadFailed, match="the GGUF could not be read"):
        orchestrator.apply(load())
    assert docker.calls[-1] == "stop k3-test"


# an interrupted health wait: the next apply verifies ------------------------------------------------


def died_before_verify(orchestrator: Orchestrator, loaded) -> None:  # noqa: ANN001
    """An apply that meant to verify (a verifier wired) launched, then died before its verify ran."""
    orchestrator.ports.verifier = lambda: None
    try:
        orchestrator.apply(loaded)
    finally:
        orchestrator.ports.verifier = None


def test_a_launch_nobody_verified_is_a_verify_step_in_the_next_plan(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    died_before_verify(orchestrator, load())
    record = orchestrator.ports.state.read(unverified_key("k3-test"))
    labels = docker.containers["k3-test"]["Config"]["Labels"]
    assert record["fingerprint"] == labels["kimik3.container.fingerprint"]
    owed = orchestrator.plan(load())
    assert not owed.converged  # `plan --detailed-exitcode` exits 4: a timer's apply finishes it
    assert [(s.kind, s.action) for s in owed.changes] == [("verify", Action.READ)]
    assert "did not verify it" in owed.changes[0].reason
    checks = []
    result = orchestrator.apply_or_revert(load(), lambda: checks.append("verify"))
    assert [s.kind for s in result.executed] == ["verify"] and checks == ["verify"]  # verify ran once
    assert orchestrator.ports.state.read(unverified_key("k3-test")) is None and orchestrator.plan(load()).converged
    orchestrator.apply_or_revert(load(), lambda: checks.append("verify"))
    assert checks == ["verify"]  # verified once: a converged apply sends no requests again


def test_an_apply_without_verify_leaves_the_owed_verify_in_the_plan(world):  # noqa: F811
    orchestrator, _, _, _ = world
    died_before_verify(orchestrator, load())
    result = orchestrator.apply_or_revert(load(), None)  # --no-verify-server: nothing runs, the verify stays owed
    assert not result.changed and [s.kind for s in orchestrator.plan(load()).changes] == ["verify"]


def test_an_apply_that_launches_verifies_its_own_launch_once_at_its_end(world):  # noqa: F811
    orchestrator, _, _, _ = world
    checks = []
    result = orchestrator.apply_or_revert(load(), lambda: checks.append("verify"))
    assert checks == ["verify"] and "verify" not in [s.kind for s in result.executed]
    assert result.final.converged and orchestrator.plan(load()).converged


def test_apply_without_verify_owes_nothing(world):  # noqa: F811
    orchestrator, _, _, _ = world
    orchestrator.apply_or_revert(load(), None)  # --no-verify-server: the operator waived the verify of this launch
    assert orchestrator.ports.state.read(unverified_key("k3-test")) is None and orchestrator.plan(load()).converged


def test_a_failing_resumed_verify_reverts(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load(), lambda: None)  # good, verified
    bad = load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048"))
    died_before_verify(orchestrator, bad)

    with pytest.raises(VerifyFailed, match="reverted to the last good profile"):
        orchestrator.apply_or_revert(bad, verify_failing("chat"))
    cmd = docker.containers["k3-test"]["Config"]["Cmd"]
    assert cmd[cmd.index("--ubatch-size") + 1] == "4096"


def test_a_revert_leaves_no_record_of_the_failed_candidates_owed_verify(world):  # noqa: F811
    """Issue 38 item 4: the record named the failed candidate after the revert replaced it."""
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load(), lambda: None)  # good, verified

    with pytest.raises(VerifyFailed, match="reverted to the last good profile"):
        orchestrator.apply_or_revert(
            load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")), verify_failing("chat")
        )
    assert orchestrator.ports.state.read(unverified_key("k3-test")) is None
    assert orchestrator.plan(load()).converged


def test_a_started_container_is_recorded_unverified_too(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load(), lambda: None)
    assert orchestrator.ports.state.read(unverified_key("k3-test")) is None
    docker.containers["k3-test"]["State"].update(Status="exited", ExitCode=137)
    died_before_verify(orchestrator, load())
    assert orchestrator.ports.state.read(unverified_key("k3-test")) is not None


# a foreign listener on the port ------------------------------------------------------------------


def test_proc_net_tcp_listeners_are_parsed_from_a_recorded_table() -> None:
    tables = (FIXTURES / "proc-net-tcp.dev-listeners.txt").read_text()  # http.server on 127.0.0.1:19251, ::1:19252
    assert list(parse_tcp_listeners(tables, 19251).values()) == ["127.0.0.1"]
    assert list(parse_tcp_listeners(tables, 19252).values()) == ["::1"]
    assert parse_tcp_listeners(tables, 19253) == {}


def test_a_foreign_listener_is_refused_naming_pid_and_program(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    host = orchestrator.ports.host
    host.tcp_text, host.owners = TCP_HEADER + listening(18999, 4711), {4711: (4242, "python3")}
    assert [(p.address, p.pid, p.program) for p in collect_listeners(host, 18999)] == [("127.0.0.1", 4242, "python3")]
    with pytest.raises(PlanError, match=r"port 18999 is held by pid 4242 \(python3\) listening on 127.0.0.1"):
        orchestrator.plan(load())
    assert docker.calls == []


def test_our_own_container_on_the_port_is_not_a_refusal(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load())
    docker.containers["k3-test"]["State"]["Pid"] = 777
    host = orchestrator.ports.host
    host.tcp_text = TCP_HEADER + listening(18999, 555, "00000000")
    host.owners = {555: (777, "llama-server")}
    assert orchestrator.plan(load()).converged
    host.owners = {}  # an owner kimik3 cannot see while its container runs: not judged
    assert orchestrator.plan(load()).converged
    host.owners = {555: (4242, "nc")}
    with pytest.raises(PlanError, match=r"pid 4242 \(nc\)"):
        orchestrator.plan(load())


def test_a_container_is_named_from_a_recorded_cgroup_file() -> None:
    recorded = (FIXTURES / "proc-pid-cgroup.docker-cgroupfs.txt").read_text()  # llama-server in the demo container
    assert parse_cgroup_container(recorded) == "a4a91e5e4ae13f3f577dbecac526405829c3a23e4388381512b8cf32cbd2f1ee"
    systemd_driver = "0::/system.slice/docker-" + "b" * 64 + ".scope\n"  # dockerd with the systemd cgroup driver
    assert parse_cgroup_container(systemd_driver) == "b" * 64
    assert parse_cgroup_container("0::/user.slice/user-1000.slice/session-3.scope\n") is None
    assert parse_cgroup_container("") is None


def test_any_process_inside_our_container_is_ours_by_its_cgroup(world):  # noqa: F811
    """The listener is a child of llama-server (or a wrapper): its pid is not the container's, its cgroup is."""
    orchestrator, docker, _, _ = world
    orchestrator.apply(load())
    ours = docker.containers["k3-test"]
    ours["State"]["Pid"] = 777
    host = orchestrator.ports.host
    host.tcp_text = TCP_HEADER + listening(18999, 555, "00000000")
    host.owners = {555: (778, "llama-server")}
    host.cgroups = {778: f"0::/docker/{ours['Id']}\n"}
    assert orchestrator.plan(load()).converged
    host.cgroups = {778: "0::/docker/" + "f" * 64 + "\n"}  # another team's container on our port: refused
    with pytest.raises(PlanError, match=r"pid 778 \(llama-server\)"):
        orchestrator.plan(load())


# a revert resolves the last good profile against its own folder -----------------------------------


def test_the_revert_uses_the_folder_the_good_profile_was_applied_from(tmp_path: Path):
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    good_dir.mkdir(), bad_dir.mkdir()
    (good_dir / "src.tar.gz").write_bytes(b"source")  # the good profile names it relative: archive: src.tar.gz
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, docker = fake_ports(FakeHub("org/k3", REV, FILES, tmp_path / "hub"))

    def orchestrator(folder: Path) -> Orchestrator:
        return Orchestrator(ports, NullReporter(), folder, tmp_path / "Dockerfile.llamacpp")

    orchestrator(good_dir).apply_or_revert(load())
    bad = parse_profile(
        PROFILE.replace("archive: src.tar.gz", f"archive: {good_dir / 'src.tar.gz'}").replace(
            "parallel: 2", "parallel: 2, ubatch: 2048"
        ),
        str(bad_dir / "bad.yaml"),
    )
    docker.crash_on_start = True
    real_run = docker.run_container

    def crash_the_new_one(spec):
        docker.crash_on_start = "2048" in spec.command
        return real_run(spec)

    docker.run_container = crash_the_new_one
    with pytest.raises(LoadFailed, match="reverted to the last good profile") as failed:
        orchestrator(bad_dir).apply_or_revert(bad)
    assert "failed too" not in str(failed.value)
    assert docker.containers["k3-test"]["State"]["Status"] == "running"


# systemd.enable: false -------------------------------------------------------------------------------


def test_enable_false_installs_when_reset_failed_finds_the_unit_unloaded(world):  # noqa: F811
    orchestrator, _, _, _ = world
    units = orchestrator.ports.units
    real = units.systemctl

    def systemctl(*args: str) -> None:
        if args[0] == "reset-failed":  # systemd unloads a disabled unit nothing references after daemon-reload
            raise PermanentError(f"systemctl reset-failed {args[1]} failed (exit 1): Unit {args[1]} not loaded.")
        real(*args)

    units.systemctl = systemctl
    orchestrator.apply(load(PROFILE + "systemd: {unit: k3-test, enable: false}\n"))
    assert units.state["k3-test.service"]["ActiveState"] == "active"


@pytest.mark.parametrize(
    "answer",
    [
        "Failed to connect to bus: No such file or directory",
        "Access denied",
        "Failed to reset failed state of unit k3-test.service: Connection timed out",
    ],
)
def test_reset_failed_failing_for_another_reason_fails_the_install(world, answer):  # noqa: F811
    """Only "not loaded" / "not found" means nothing to reset; a broken systemd is not swallowed."""
    orchestrator, _, _, _ = world
    units = orchestrator.ports.units
    real = units.systemctl

    def systemctl(*args: str) -> None:
        if args[0] == "reset-failed":
            raise PermanentError(f"systemctl reset-failed {args[1]} failed (exit 1): {answer}")
        real(*args)

    units.systemctl = systemctl
    with pytest.raises(PermanentError, match=answer.split(":")[0]):
        orchestrator.apply(load(PROFILE + "systemd: {unit: k3-test, enable: false}\n"))
    assert "systemctl start k3-test.service" not in units.calls


# a dockerd restart during the health wait -----------------------------------------------------------


def killed_then(docker, restarts: int):  # noqa: ANN001, ANN201 - FakeDocker; its run_container, patched
    """The launch is killed (137, as a stopping dockerd does); its restart policy starts it `restarts` times."""
    real_run, left = docker.run_container, [restarts]

    def run(spec):  # noqa: ANN001
        cid = real_run(spec)
        docker.containers[spec.name]["State"].update(Status="exited", ExitCode=137, StartedAt="t-first")
        return cid

    def inspect(name):  # noqa: ANN001
        container = docker.containers.get(name)
        state = container["State"] if container else {}
        if state.get("Status") == "exited" and state.get("ExitCode") == 137 and left[0] > 0 and docker.polled:
            left[0] -= 1
            state.update(Status="running", ExitCode=0, StartedAt=f"t-again-{left[0]}")
        docker.polled = state.get("Status") == "exited"
        return container

    docker.polled = False
    return run, inspect


def test_a_launch_killed_by_a_dockerd_restart_and_started_again_is_waited_for(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    docker.logs = "load_tensors: loading model tensors\n"
    docker.run_container, docker.inspect_container = killed_then(docker, restarts=1)
    result = orchestrator.apply(load())
    assert result.final.converged and "stop k3-test" not in docker.calls
    assert docker.containers["k3-test"]["State"]["Status"] == "running"


def test_a_kill_that_is_not_followed_by_a_restart_fails_as_killed_not_out_of_memory(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    docker.logs = "load_tensors: loading model tensors\n"
    docker.run_container, docker.inspect_container = killed_then(docker, restarts=0)
    started = orchestrator.ports.clock.monotonic()
    with pytest.raises(
        LoadFailed,
        match=r"stopped by a signal .*not out of memory.* \[killed: exited, exit code 137, "
        r"stopped\]",
    ) as failed:
        orchestrator.apply(load())
    assert "ran out of memory" not in str(failed.value)
    assert orchestrator.ports.clock.monotonic() - started >= 30  # the grace for a restart policy to start it again


def exits_at_once(docker, **state: object) -> None:  # noqa: ANN001 - the fake docker
    """Each container the fake docker runs has exited 137 by the time it is inspected (with `state` besides), its
    log at the load."""
    docker.logs = "load_tensors: loading model tensors\n"
    real_run = docker.run_container

    def run(spec):  # noqa: ANN001, ANN202
        cid = real_run(spec)
        docker.containers[spec.name]["State"].update(Status="exited", ExitCode=137, **state)
        return cid

    docker.run_container = run


def test_an_oom_kill_docker_reports_is_named_out_of_memory_and_not_waited_on(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    exits_at_once(docker, OOMKilled=True)
    with pytest.raises(LoadFailed, match=r"ran out of memory .* \[oom: exited, exit code 137, stopped\]"):
        orchestrator.apply(load())
    assert orchestrator.ports.clock.monotonic() < 5


def test_a_systemd_profiles_container_killed_by_a_dockerd_restart_is_started_by_the_apply(world):  # noqa: F811
    """Restart policy "no" (systemd supervises it): dockerd does not start it again, so the health wait does."""
    orchestrator, docker, _, _ = world
    exits_at_once(docker)  # dockerd stopped it
    result = orchestrator.apply(load(PROFILE + "systemd: {unit: k3-test, enable: true}\n"))
    assert result.final.converged and "start k3-test" in docker.calls and "stop k3-test" not in docker.calls
    assert orchestrator.ports.clock.monotonic() < 30  # no waiting for a restart policy that will never act
    assert docker.containers["k3-test"]["State"]["Status"] == "running"


def test_a_bad_gguf_exit_is_not_waited_on_as_a_restart(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    docker.crash_on_start, docker.logs = True, GGUF_LOG
    with pytest.raises(LoadFailed, match="the GGUF could not be read"):
        orchestrator.apply(load())
    assert orchestrator.ports.clock.monotonic() < 5


def test_a_failed_launch_under_systemd_stops_its_unit_too(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    with_unit = PROFILE + "systemd: {unit: k3-test, enable: true}\n"
    orchestrator.apply(load(with_unit))
    assert orchestrator.ports.units.state["k3-test.service"]["ActiveState"] == "active"
    docker.crash_on_start, docker.logs = True, GGUF_LOG
    with pytest.raises(LoadFailed, match="the GGUF could not be read"):
        orchestrator.apply(load(with_unit.replace("parallel: 2", "parallel: 2, ubatch: 2048")))
    assert "systemctl stop k3-test.service" in orchestrator.ports.units.calls
    assert docker.containers["k3-test"]["State"]["Status"] == "exited"


def test_a_failed_first_launch_under_systemd_has_no_unit_to_stop(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    docker.crash_on_start, docker.logs = True, BIND_LOG
    with pytest.raises(LoadFailed, match="could not bind its port"):
        orchestrator.apply(load(PROFILE + "systemd: {unit: k3-test, enable: true}\n"))
    assert docker.calls[-1] == "stop k3-test"


def test_an_owner_kimik3_cannot_see_is_refused_when_no_kimik3_container_runs(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.ports.host.tcp_text = TCP_HEADER + listening(18999, 909)  # owners: {} (another user's process)
    with pytest.raises(PlanError, match="port 18999 is held by a process kimik3 cannot see"):
        orchestrator.plan(load())
