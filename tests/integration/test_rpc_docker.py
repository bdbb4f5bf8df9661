"""RPC workers with real parts (issue 18): a real sshd on a loopback port (its own keys), so the worker's
Docker is reached through the docker SDK's ssh:// transport; an rpc-server container from the demo's
CPU image bound to 127.0.0.2 (another loopback address than the main server's 127.0.0.1); the demo
model split between the main server (the first two layers' experts: serve.n_cpu_moe 2) and the worker (the
rest, on device RPC0).

Checked: temperature-0 completions equal the single-host server's; the server's load log shows the RPC
device holding weights (and verify's rpc check says so); the worker's port is bound at 127.0.0.2 only;
a restarted worker and a removed one are drift that apply heals; a worker the profile drops is removed
under the lock of its host (a lock left there stops the apply until `force-unlock ID FILE`); destroy
removes the worker; a public bind address is refused before anything starts.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.realparts import demo_hub, demo_profile, docker, kimik3, remove_leftovers, write_profile
from support.sshd import Sshd, sshd_on_path

from kimik3_demo.hub import FixtureHub
from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.adapters.worker_lock import DockerHostLock
from kimik3_reconciler.model.host_lock import LockHolder

# Each test that needs the two-host deployment takes `converged` (applied before it: a no-op when converged), so the
# destroy and dropped-worker tests leave nothing broken for the tests after them, in whatever order they run.
pytestmark = [pytest.mark.docker]

SSH_PORT = 19310
WORKER_BIND, WORKER_PORT = "127.0.0.2", 19311
MAIN, MAIN_PORT = "k3rpc-main", 19312
SOLO, SOLO_PORT = "k3rpc-solo", 19313
WORKER = f"{MAIN}-rpc-w1"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


def completion(port: int, prompt: str) -> str:
    body = json.dumps({"prompt": prompt, "n_predict": 24, "temperature": 0, "seed": 7, "cache_prompt": False}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())["content"]


def plan(work: Path, name: str = "rpc.yaml") -> dict:
    return json.loads(kimik3(work, "plan", "--json", name, check=False).stdout)


def steps(planned: dict) -> dict[str, dict]:
    return {s["kind"]: s for s in planned["steps"]}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with sshd_on_path(tmp_path_factory.mktemp("k3rpc-sshd"), SSH_PORT) as server:
        yield server


@pytest.fixture(scope="module")
def hub() -> Iterator[FixtureHub]:
    with demo_hub() as running:
        yield running


def rpc_profile(work: Path, hub: FixtureHub, sshd: Sshd, bind: str = WORKER_BIND) -> dict:
    profile = demo_profile(work, MAIN, MAIN_PORT, hub.url)
    profile["serve"]["n_cpu_moe"] = 2  # layers 0-1's experts stay in the main server's RAM, the rest go to RPC0
    profile["rpc"] = {"workers": [{"name": "w1", "docker": sshd.docker_url, "bind": bind, "port": WORKER_PORT}]}
    return profile


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub, sshd: Sshd) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("k3rpc")
    remove_leftovers(MAIN, WORKER, SOLO)
    subprocess.run(["docker", "volume", "rm", "-f", f"kimik3-rpc-cache-{MAIN}-w1"], capture_output=True)
    solo = demo_profile(work, SOLO, SOLO_PORT, hub.url)
    solo["serve"]["n_cpu_moe"] = 2  # the same split flags, with every device local: the reference answers
    write_profile(work, solo, "solo.yaml")
    write_profile(work, rpc_profile(work, hub, sshd), "rpc.yaml")
    yield work
    for name in (MAIN, WORKER, SOLO):
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    subprocess.run(["docker", "volume", "rm", "-f", f"kimik3-rpc-cache-{MAIN}-w1"], capture_output=True)


def test_a_public_bind_address_is_refused_before_anything_starts(tmp_path: Path, hub: FixtureHub, sshd: Sshd) -> None:
    profile = rpc_profile(tmp_path, hub, sshd, bind="8.8.8.8")
    profile["name"] = "k3rpc-public"
    write_profile(tmp_path, profile)
    result = kimik3(tmp_path, "apply", "profile.yaml", check=False)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "rpc.workers[0].bind" in out and "8.8.8.8 is a public address" in out
    assert "Never run the RPC server on an open network" in out
    assert docker("ps", "-aq", "--filter", "name=k3rpc-public") == ""


@pytest.fixture(scope="module")
def solo(work: Path) -> Path:
    """The single-host reference server, applied once: no test changes it."""
    kimik3(work, "apply", "solo.yaml")
    return work


@pytest.fixture
def converged(solo: Path) -> Path:
    """The two-host profile applied before each test that needs it (a no-op when it is converged): a test that
    destroyed it or dropped its worker leaves none broken for the next, and each test runs alone too."""
    kimik3(solo, "apply", "rpc.yaml")
    return solo


def test_the_split_model_answers_like_the_single_host_server(converged: Path) -> None:
    assert docker("inspect", "-f", "{{.State.Status}}", WORKER) == "running"
    argv = json.loads(docker("inspect", "-f", "{{json .Args}}", MAIN))
    assert argv[argv.index("--rpc") + 1] == f"{WORKER_BIND}:{WORKER_PORT}"
    for prompt in PROMPTS:
        assert completion(MAIN_PORT, prompt) == completion(SOLO_PORT, prompt), prompt


def test_the_rpc_device_holds_layers_and_the_port_is_bound_only_where_the_profile_says(converged: Path) -> None:
    log = subprocess.run(["docker", "logs", MAIN], capture_output=True, text=True)
    text = log.stdout + log.stderr
    rpc = [ln for ln in text.splitlines() if f"RPC0[{WORKER_BIND}:{WORKER_PORT}] model buffer size" in ln]
    local = [ln for ln in text.splitlines() if "CPU_Mapped model buffer size" in ln or "CPU model buffer size" in ln]
    print("\n".join(rpc + local))  # shown with -s: what each device holds
    assert rpc and float(rpc[-1].split("=")[1].split()[0]) > 0
    assert local  # the main server keeps a share (layers 0-1's experts, the embeddings)
    report = json.loads(kimik3(converged, "verify", "--json", "rpc.yaml", check=False).stdout)
    check = next(c for c in report["checks"] if c["name"] == "rpc")
    assert check["status"] == "ok", check
    assert f"w1 ({WORKER_BIND}:{WORKER_PORT}) holds" in check["detail"]
    worker_log = subprocess.run(["docker", "logs", WORKER], capture_output=True, text=True).stdout
    assert f"endpoint       : {WORKER_BIND}:{WORKER_PORT}" in worker_log and "CPU:" in worker_log


def test_a_converged_two_host_profile_plans_nothing(converged: Path) -> None:
    planned = plan(converged)
    assert [s["action"] for s in planned["steps"] if s["action"] != "noop"] == [], planned["steps"]


def test_a_restarted_worker_is_drift_and_apply_heals_it(converged: Path) -> None:
    docker("restart", WORKER)
    container = steps(plan(converged))["container"]
    assert container["action"] == "replace" and "worker restarted after it started (w1)" in container["reason"]
    kimik3(converged, "apply", "rpc.yaml")
    assert all(s["action"] == "noop" for s in plan(converged)["steps"])
    assert completion(MAIN_PORT, PROMPTS[0]) == completion(SOLO_PORT, PROMPTS[0])


def test_a_removed_worker_is_drift_and_apply_heals_it(converged: Path) -> None:
    docker("rm", "-f", WORKER)
    planned = steps(plan(converged))
    assert planned["worker"]["action"] == "create" and "no rpc-server on w1" in planned["worker"]["reason"]
    assert planned["container"]["action"] == "replace"
    kimik3(converged, "apply", "rpc.yaml")
    assert docker("inspect", "-f", "{{.State.Status}}", WORKER) == "running"
    assert completion(MAIN_PORT, PROMPTS[1]) == completion(SOLO_PORT, PROMPTS[1])


def test_a_dropped_worker_is_removed_under_its_hosts_lock_which_force_unlock_clears(
    converged: Path, sshd: Sshd
) -> None:
    """The rpc section dropped: the apply takes the lock on the dropped worker's host too, so a lock a run of
    another main host left there stops it (exit 5, the worker named, nothing changed); `force-unlock ID FILE`
    reaches that host through the state record; then the apply relaunches the main server without --rpc and
    removes the worker's rpc-server."""
    profile = yaml.safe_load((converged / "rpc.yaml").read_text())
    del profile["rpc"]
    write_profile(converged, profile, "dropped.yaml")
    other = LockHolder(
        id="0123456789ab",
        operation="apply",
        profile=MAIN,
        pid=4242,
        host="another-main-host",
        started="2026-12-03T04:24:03+00:00",
    )
    left = DockerHostLock(DockerEngine(), "w1")  # the worker's Docker is this daemon (reached over ssh by kimik3)
    assert left.try_acquire(other).acquired
    try:
        held = kimik3(converged, "apply", "dropped.yaml", check=False)
        assert held.returncode == 5, held.stderr
        assert (
            f"rpc worker w1 ({sshd.docker_url}) is locked by another kimik3: apply of {MAIN} by pid 4242" in held.stderr
        )
        assert "kimik3 force-unlock 0123456789ab FILE" in held.stderr
        assert docker("inspect", "-f", "{{.State.Status}}", WORKER) == "running"  # nothing was changed
        said = kimik3(converged, "force-unlock", "0123456789ab", "dropped.yaml").stdout
        assert f"removed lock 0123456789ab on rpc worker w1 ({sshd.docker_url})" in said
    finally:
        if left.holder()[0] == other:  # the test failed before force-unlock: take its own lock away
            left.break_lock()
    dropped = kimik3(converged, "apply", "dropped.yaml")
    assert docker("ps", "-aq", "--filter", f"name=^{WORKER}$") == ""
    # Its tensor cache is kept, and named by this apply, the last run that knows the worker.
    volume = f"kimik3-rpc-cache-{MAIN}-w1"
    said = dropped.stdout + dropped.stderr
    assert f"its tensor cache {volume} is kept, and no later run names it" in said, said
    assert f"`docker volume rm {volume}` through w1's Docker ({sshd.docker_url})" in said, said
    assert subprocess.run(["docker", "volume", "inspect", volume], capture_output=True).returncode == 0
    assert "--rpc" not in json.loads(docker("inspect", "-f", "{{json .Args}}", MAIN))
    assert not (converged / "state" / "rpc-workers" / f"{MAIN}.json").exists()


def test_destroy_removes_the_worker_too_and_its_tensor_cache_with_model(converged: Path) -> None:
    """The worker's tensor-cache volume is named and kept; `--model` removes it through the worker's Docker."""
    volume = f"kimik3-rpc-cache-{MAIN}-w1"

    def volume_exists() -> bool:
        return subprocess.run(["docker", "volume", "inspect", volume], capture_output=True).returncode == 0

    assert volume_exists()  # the worker's rpc-server -c made it
    kept = kimik3(converged, "destroy", "rpc.yaml")
    assert docker("ps", "-aq", "--filter", f"name=^{WORKER}$") == ""
    assert docker("ps", "-aq", "--filter", f"name=^{MAIN}$") == ""
    said = kept.stdout + kept.stderr
    assert f"w1: {volume}" in said and "pass --model to remove" in said, said
    assert volume_exists()
    # The model's files go too: the next test's `converged` downloads them again from the fixture hub.
    removed = kimik3(converged, "destroy", "--model", "rpc.yaml")
    assert f"w1: {volume}" in removed.stdout + removed.stderr and not volume_exists()
