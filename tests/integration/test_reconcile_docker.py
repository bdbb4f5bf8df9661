"""The reconcile loop against real parts: dockerd, the CPU llama-server image built from
Dockerfile.llamacpp, and the real huggingface_hub client against a local hub fixture.

Every test drives the real `kimik3` command in a subprocess, as a user would. The image is the
demo's (same build args), so Docker's layer cache makes every build after the first instant.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.background import Background
from support.realparts import (
    DEMO_DIR,
    REPO_ROOT,
    demo_profile,
    docker,
    kimik3,
    remove_leftovers,
    require_docker_and_demo_hub,
    write_profile,
)

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_demo.prepare import DEMO_REPO, DEMO_REVISION, demo_repos

pytestmark = pytest.mark.docker

NAME = "kimi-k3-itest"
PORT = 18282


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureHub]:
    repos = demo_repos(require_docker_and_demo_hub())
    # A quant that downloads and verifies fine but cannot load: its shard is cut short.
    broken = tmp_path_factory.mktemp("broken") / "Kimi-K3-tiny-UD-BROKEN.gguf"
    good = repos[0].files["UD-Q2_K_XL/Kimi-K3-tiny-UD-Q2_K_XL-00001-of-00002.gguf"]
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    files = {**repos[0].files, "UD-BROKEN/Kimi-K3-tiny-UD-BROKEN.gguf": broken}
    with FixtureHub([FixtureRepo(DEMO_REPO, DEMO_REVISION, files)]) as running:
        yield running


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("kimik3")
    remove_leftovers(NAME, f"{NAME}-b")
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["gate"]["smoke"] = True
    write_profile(work, profile)
    yield work
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


@pytest.fixture
def converged(workdir: Path) -> Path:
    """The base profile applied (a no-op when it already is): each test that needs a running deployment has one,
    whatever ran before it (the tests run in a random order) or whether it runs alone."""
    kimik3(workdir, "apply", "profile.yaml")
    return workdir


def with_a_patch_that_does_not_apply(work: Path) -> Path:
    """The base profile with a patch that does not apply to the pin's source: its build fails at the patch step."""
    (work / "does-not-apply.patch").write_text(
        "--- a/README.md\n+++ b/README.md\n@@ -1,1 +1,1 @@\n-this line is not in llama.cpp's README\n+kimik3\n"
    )
    return edited(work, lambda p: p["build"].update(patches=["does-not-apply.patch"]))


def first_use_of_the_pin(work: Path) -> None:
    """A build of the pin that fails at the patch step: it records the source archive's sha256 (at its first use,
    before the build), touching nothing else."""
    result = kimik3(work, "apply", with_a_patch_that_does_not_apply(work).name, check=False)
    assert result.returncode == 1 and "PATCH FAILED: 00-does-not-apply.patch" in result.stderr, result.stderr[-3000:]


def edited(work: Path, change) -> Path:  # noqa: ANN001 - a callable editing the profile dict
    profile = yaml.safe_load((work / "profile.yaml").read_text())
    change(profile)
    return write_profile(work, profile, "edited.yaml")


def plan_steps(work: Path, change) -> list[tuple[str, str]]:  # noqa: ANN001 - a callable editing the profile dict
    """The plan of the profile edited by `change`: each step's (kind, action)."""
    plan = json.loads(kimik3(work, "plan", "--json", edited(work, change).name).stdout)
    return [(s["kind"], s["action"]) for s in plan["steps"]]


def container_identity() -> tuple[str, str]:
    return tuple(docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", NAME).split())  # type: ignore[return-value]


def test_apply_converges_and_answers_a_chat(workdir: Path) -> None:
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)  # a launch to converge after, whatever ran before
    applied = kimik3(workdir, "apply", "profile.yaml")
    assert f"{NAME}: converged after" in applied.stdout
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    report = json.loads(kimik3(workdir, "verify", "--json", "profile.yaml").stdout)
    assert report["ok"] is True
    # The fixed flags of seed 000 are in the real container's argv.
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    for flag in ("--numa", "--cache-type-k", "--cache-type-v", "--load-mode", "--threads", "--threads-batch"):
        assert flag in argv
    mounts = json.loads(docker("inspect", "-f", "{{json .Mounts}}", NAME))
    assert all(not m["RW"] for m in mounts), "weights must be mounted read-only"


def test_the_image_was_smoke_tested_once(converged: Path) -> None:
    records = list((converged / "state" / "smoke").glob("*.json"))
    assert records and all(json.loads(r.read_text())["passed"] is True for r in records)
    assert subprocess.run(["docker", "inspect", f"{NAME}-smoke"], capture_output=True).returncode != 0
    plan = json.loads(kimik3(converged, "plan", "--json", "profile.yaml").stdout)
    smoke = next(s for s in plan["steps"] if s["kind"] == "smoke")
    assert (smoke["action"], smoke["reason"]) == ("noop", "image passed its smoke test")
    kimik3(converged, "apply", "profile.yaml")  # once: another apply of the same image does not smoke-test it again
    assert sorted((converged / "state" / "smoke").glob("*.json")) == sorted(records)


def test_second_apply_changes_nothing(converged: Path) -> None:
    before = container_identity()
    result = kimik3(converged, "apply", "--json", "profile.yaml")
    assert json.loads(result.stdout)["changed"] is False
    assert container_identity() == before


def test_ubatch_change_replaces_only_the_container(converged: Path) -> None:
    path = edited(converged, lambda p: p["serve"].update(ubatch=2048))
    plan = json.loads(kimik3(converged, "plan", "--json", path.name).stdout)
    changes = [(s["kind"], s["action"]) for s in plan["steps"] if s["action"] != "noop"]
    assert changes == [("preread", "read"), ("container", "replace"), ("health", "read")]  # pre-read: issue 15
    container = next(s for s in plan["steps"] if s["kind"] == "container")
    assert container["diff"] == [{"field": "serve.ubatch", "old": 4096, "new": 2048}]
    detailed = kimik3(converged, "plan", "--detailed-exitcode", path.name, check=False)
    assert detailed.returncode == 4
    before = container_identity()
    applied = json.loads(kimik3(converged, "apply", "--json", path.name).stdout)
    assert [(s["kind"], s["action"]) for s in applied["executed"]] == [
        ("preread", "read"),
        ("container", "replace"),
        ("health", "read"),
    ]
    assert container_identity() != before
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    assert argv[argv.index("--ubatch-size") + 1] == "2048"
    kimik3(converged, "apply", "profile.yaml")  # back to the base profile for the next tests


def test_commit_and_quant_changes_plan_the_right_layers(converged: Path) -> None:
    assert plan_steps(converged, lambda p: p["build"].update(commit="1" * 40)) == [
        ("model", "noop"),
        ("image", "create"),
        ("smoke", "read"),
        ("preread", "read"),
        ("container", "replace"),
        ("health", "read"),
    ]
    assert plan_steps(converged, lambda p: p["model"].update(quant="UD-Q4_K_XL")) == [
        ("model", "create"),
        ("image", "noop"),
        ("smoke", "noop"),
        ("preread", "read"),
        ("container", "replace"),
        ("health", "read"),
    ]
    (converged / "extra.patch").write_text("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-x\n+y\n")
    path = edited(converged, lambda p: p["build"].update(patches=["extra.patch"]))
    plan = json.loads(kimik3(converged, "plan", "--json", path.name).stdout)
    image = next(s for s in plan["steps"] if s["kind"] == "image")
    assert image["action"] == "create" and image["diff"][0]["field"] == "build.patches"


def test_killed_container_is_restored(converged: Path) -> None:
    docker("kill", NAME)
    plan = kimik3(converged, "plan", "profile.yaml").stdout
    assert "start it" in plan
    kimik3(converged, "apply", "profile.yaml")
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    docker("rm", "-f", NAME)
    kimik3(converged, "apply", "profile.yaml")
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"


def test_crash_while_loading_fails_with_the_servers_last_lines(workdir: Path) -> None:
    path = edited(workdir, lambda p: p["model"].update(quant="UD-BROKEN"))
    result = kimik3(workdir, "apply", path.name, check=False)
    assert result.returncode == 1
    assert "while loading the model" in result.stderr
    assert "exiting due to model loading error" in result.stderr
    assert "Traceback" not in result.stderr
    kimik3(workdir, "apply", "profile.yaml")  # the next apply of a good profile converges again
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"


def test_invalid_profile_is_refused_and_touches_nothing(converged: Path) -> None:
    before = container_identity()
    bad = converged / "bad.yaml"
    bad.write_text((converged / "profile.yaml").read_text().replace("ubatch:", "ubatc:"))
    for command in ("validate", "apply"):
        result = kimik3(converged, command, bad.name, check=False)
        assert result.returncode == 2
        assert "bad.yaml:" in result.stderr and "did you mean 'ubatch'" in result.stderr
        assert "Traceback" not in result.stderr
    assert container_identity() == before


def test_destroy_keeps_model_and_image_unless_asked(converged: Path) -> None:
    kimik3(converged, "destroy", "profile.yaml")
    assert subprocess.run(["docker", "inspect", NAME], capture_output=True).returncode != 0
    assert docker("images", "-q", "kimi-k3-llamacpp:mainline-ad1de39-cpu")
    status = json.loads(kimik3(converged, "status", "--json", "profile.yaml").stdout)
    assert status["container"] is None and status["model"]["missing"] == []
    kimik3(converged, "down", "--model", "profile.yaml")
    status = json.loads(kimik3(converged, "status", "--json", "profile.yaml").stdout)
    assert len(status["model"]["missing"]) == 2


def test_a_patch_that_does_not_apply_fails_the_build_naming_it(converged: Path) -> None:
    workdir, before = converged, container_identity()
    path = with_a_patch_that_does_not_apply(workdir)
    steps = {s["kind"]: s for s in json.loads(kimik3(workdir, "plan", "--json", path.name).stdout)["steps"]}
    # Issue 15: the build reads the model into the page cache while dockerd builds (when this host's RAM holds it
    # and the compile's share: else the pre-read step says why not); a build that fails still fails as before.
    during = steps["image"]["spec"]["preread"] is not None
    assert ("the build pre-reads" in steps["image"]["reason"]) == during
    result = kimik3(workdir, "apply", path.name, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "PATCH FAILED: 00-does-not-apply.patch" in result.stderr
    assert "failed at Step" in result.stderr and "Hunk #1 FAILED" in result.stderr
    assert ("pre-read-alongside" in result.stderr) == during
    assert container_identity() == before  # a failed build never touches the running container


def test_a_changed_source_archive_is_refused(workdir: Path) -> None:
    # A build used the pin's archive: its sha256 is recorded. A different file for the same source@commit must be
    # refused before anything runs.
    first_use_of_the_pin(workdir)
    assert list((workdir / "state" / "archives").glob("mainline-*.json"))
    other = workdir / "other-archive.tar.gz"
    other.write_bytes((DEMO_DIR / "llama.cpp-b11434.tar.gz").read_bytes() + b"\0")
    path = edited(workdir, lambda p: p["build"].update(archive=str(other)))
    result = kimik3(workdir, "plan", path.name, check=False)
    assert result.returncode == 2
    assert "changed since its first use" in result.stderr and "Traceback" not in result.stderr


def test_a_patch_that_applies_is_built_in_and_going_back_retags_the_kept_build(workdir: Path) -> None:
    kimik3(workdir, "apply", "profile.yaml")
    tag = "kimi-k3-llamacpp:mainline-ad1de39-cpu"
    unpatched = docker("image", "inspect", "-f", "{{.Id}}", tag)
    patch = REPO_ROOT / "tests" / "fixtures" / "server-log-line.patch"
    path = edited(workdir, lambda p: p["build"].update(patches=[str(patch)]))
    applied = json.loads(kimik3(workdir, "apply", "--json", path.name).stdout)
    executed = [(s["kind"], s["action"]) for s in applied["executed"]]
    # "create" compiles; "update" re-tags the patched build an earlier run on this machine kept.
    assert executed[0] in (("image", "create"), ("image", "update"))
    assert executed[1:] == [("smoke", "read"), ("preread", "read"), ("container", "replace"), ("health", "read")]
    assert "(kimik3 test patch)" in subprocess.run(["docker", "logs", NAME], capture_output=True, text=True).stderr
    assert docker("image", "inspect", "-f", "{{.Id}}", unpatched) == unpatched  # kept as a rollback target
    back = json.loads(kimik3(workdir, "apply", "--json", "profile.yaml").stdout)
    assert [(s["kind"], s["action"]) for s in back["executed"]] == [
        ("image", "update"),
        ("preread", "read"),
        ("container", "replace"),
        ("health", "read"),
    ]
    assert docker("image", "inspect", "-f", "{{.Id}}", tag) == unpatched
    assert "(kimik3 test patch)" not in subprocess.run(["docker", "logs", NAME], capture_output=True, text=True).stderr


def test_apply_killed_during_the_load_is_resumed_not_relaunched(converged: Path, background: Background) -> None:
    import os
    import signal
    import sys
    import time

    workdir = converged  # the image built and the model fetched: the launch comes within seconds of the start
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    env = {**os.environ, "KIMIK3_STATE_DIR": str(workdir / "state"), "HF_HOME": str(workdir / "hf-home")}
    apply = background.start(
        [sys.executable, "-m", "kimik3_reconciler", "apply", "profile.yaml"],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while subprocess.run(["docker", "inspect", NAME], capture_output=True).returncode and time.monotonic() < deadline:
        time.sleep(0.05)
    # Make the load slow (freeze, then 1 % of a CPU), and kill the waiting kimik3 meanwhile.
    docker("pause", NAME)
    os.kill(apply.pid, signal.SIGKILL)
    apply.wait()
    docker("update", "--cpus", "0.01", NAME)
    docker("unpause", NAME)
    launched = container_identity()
    plan = json.loads(kimik3(workdir, "plan", "--json", "profile.yaml").stdout)
    steps = {s["kind"]: s for s in plan["steps"]}
    assert steps["container"]["action"] == "noop", steps["container"]  # never relaunched while loading
    assert steps["health"]["action"] == "read" and "wait" in steps["health"]["reason"]
    docker("update", "--cpus", "2", NAME)
    kimik3(workdir, "apply", "profile.yaml")
    assert container_identity() == launched
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"


def test_a_profile_sharing_the_port_stops_the_other_first(workdir: Path) -> None:
    kimik3(workdir, "apply", "profile.yaml")
    other = edited(workdir, lambda p: p.update(name=f"{NAME}-b"))
    try:
        plan = json.loads(kimik3(workdir, "plan", "--json", other.name).stdout)
        conflict = [s for s in plan["steps"] if s["kind"] == "conflict"]
        assert [(s["target"], s["action"]) for s in conflict] == [(NAME, "update")]
        kimik3(workdir, "apply", other.name)
        assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "exited"
        assert docker("inspect", "-f", "{{.State.Status}}", f"{NAME}-b") == "running"
        kimik3(workdir, "apply", "profile.yaml")
        assert docker("inspect", "-f", "{{.State.Status}}", f"{NAME}-b") == "exited"
        assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    finally:
        subprocess.run(["docker", "rm", "-f", f"{NAME}-b"], capture_output=True)
