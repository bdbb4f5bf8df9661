"""Saved plans, exit codes and hub errors against the real parts: dockerd, the demo's CPU llama-server image,
the fixture hub, and the real `kimik3` command in a subprocess.

`plan -out` then `apply PLAN` converges; a plan saved on a converged host is refused as stale (exit 7,
naming what moved, touching nothing) once the container is removed or the profile edited; a hub that
refuses connections or whose name does not resolve is exit 6 within seconds, naming its URL; `verify`
of another quant than the deployed one fails naming model.quant. Own names and ports (k3-plan-*, 19150-19199).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.demo_work import fresh_work
from support.realparts import demo_profile, docker, kimik3, write_profile

from kimik3_demo.hub import FixtureHub

pytestmark = pytest.mark.docker

NAME = "k3-plan-a"
PORT = 19150
CLOSED_PORT = 19199  # nothing listens there (checked): a hub refusing connections


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = fresh_work(tmp_path_factory, "kimik3-saved-plans", NAME)
    write_profile(work, demo_profile(work, NAME, PORT, hub.url))
    yield work
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


@pytest.fixture
def converged(workdir: Path) -> Path:
    """The profile applied (a no-op when it already is): whatever ran before, or alone."""
    kimik3(workdir, "apply", "profile.yaml")
    return workdir


def container_identity() -> str:
    return docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", NAME)


def exists(name: str) -> bool:
    return subprocess.run(["docker", "inspect", name], capture_output=True).returncode == 0


def test_plan_out_then_apply_plan_converges(tmp_path: Path, hub: FixtureHub) -> None:
    # A state dir and model cache of its own, the container removed: the whole plan pending, whatever ran before.
    workdir = tmp_path
    write_profile(workdir, demo_profile(workdir, NAME, PORT, hub.url))
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    planned = kimik3(workdir, "plan", "profile.yaml", "-out", "first.plan", "--detailed-exitcode", check=False)
    assert planned.returncode == 4, planned.stderr  # changes pending
    assert "plan saved to first.plan" in planned.stderr
    saved = json.loads((workdir / "first.plan").read_text())
    assert saved["format"] == "kimik3-plan" and saved["profile"]["source"] == str(workdir / "profile.yaml")
    assert [s["kind"] for s in saved["steps"] if s["action"] != "noop"][:1] == ["model"]
    applied = kimik3(workdir, "apply", "first.plan")
    assert f"{NAME}: converged after" in applied.stdout
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    assert json.loads(kimik3(workdir, "verify", "--json", "profile.yaml").stdout)["ok"] is True
    assert kimik3(workdir, "plan", "--detailed-exitcode", "profile.yaml", check=False).returncode == 0


def test_a_saved_plan_is_stale_once_the_container_is_removed(converged: Path) -> None:
    workdir = converged
    kimik3(workdir, "plan", "profile.yaml", "--out", "second.plan")  # converged: a plan with nothing to do
    docker("rm", "-f", NAME)
    started = time.monotonic()
    refused = kimik3(workdir, "apply", "second.plan", check=False)
    assert refused.returncode == 7, refused.stderr
    assert f"container {NAME}: running " in refused.stderr and "→ (none)" in refused.stderr
    assert f"step + container {NAME}: planned now, not in the saved plan" in refused.stderr
    assert "nothing was changed" in refused.stderr and "Traceback" not in refused.stderr
    assert not exists(NAME)  # touched nothing: no container was made
    print(f"stale refusal in {time.monotonic() - started:.2f} s:\n{refused.stderr}")
    # A new plan relaunches it; `apply --json PLAN` reports what ran, and verify passed.
    kimik3(workdir, "plan", "profile.yaml", "-out", "relaunch.plan")
    result = json.loads(kimik3(workdir, "apply", "--json", "relaunch.plan").stdout)
    assert [s["kind"] for s in result["executed"]] == ["container", "health"]
    assert result["final"]["converged"] is True and result["verify"]["ok"] is True


def test_a_saved_plan_is_stale_once_the_profile_is_edited(converged: Path) -> None:
    workdir = converged
    kimik3(workdir, "plan", "profile.yaml", "-out=third.plan")
    before, text = container_identity(), (workdir / "profile.yaml").read_text()
    profile = yaml.safe_load(text)
    profile["serve"]["ctx_size"] = 2048
    write_profile(workdir, profile)
    try:
        refused = kimik3(workdir, "apply", "third.plan", check=False)
    finally:
        (workdir / "profile.yaml").write_text(text)
    assert refused.returncode == 7, refused.stderr
    assert f"profile {workdir / 'profile.yaml'}: serve.ctx_size: 4096 → 2048" in refused.stderr
    assert container_identity() == before  # touched nothing


def test_other_commands_name_a_saved_plan_instead_of_parsing_it(converged: Path) -> None:
    workdir = converged
    kimik3(workdir, "plan", "profile.yaml", "-out", "third.plan")
    result = kimik3(workdir, "plan", "third.plan", check=False)
    assert result.returncode == 2 and "third.plan is a saved plan" in result.stderr
    assert "`kimik3 apply third.plan` executes it" in result.stderr


def test_verify_of_another_quant_than_the_deployed_one_fails_naming_model_quant(converged: Path) -> None:
    workdir = converged
    profile = yaml.safe_load((workdir / "profile.yaml").read_text())
    profile["model"]["quant"] = "UD-Q4_K_XL"
    write_profile(workdir, profile, "other-quant.yaml")
    result = kimik3(workdir, "verify", "other-quant.yaml", check=False)
    assert result.returncode == 1, result.stderr
    assert "the running container is not this profile's current deployment" in result.stderr
    assert "model.quant: UD-Q2_K_XL → UD-Q4_K_XL" in result.stderr and "Traceback" not in result.stderr
    assert json.loads(kimik3(workdir, "verify", "--json", "profile.yaml").stdout)["ok"] is True


def test_an_edited_or_cut_plan_is_refused_as_json_and_touches_nothing(converged: Path) -> None:
    workdir = converged
    """Held-back review: a health wait edited in the file (another container to watch and stop) ran unchecked, and a
    plan cut short read as "invalid YAML"; both are refused now, with the error as JSON on stdout for CI."""
    docker("stop", "-t", "2", NAME)
    kimik3(workdir, "plan", "profile.yaml", "-out", "restart.plan")
    data = json.loads((workdir / "restart.plan").read_text())
    number, step = next(
        (i, s) for i, s in enumerate(data["steps"], 1) if s["kind"] == "health" and s["action"] == "read"
    )
    step["spec"]["fields"]["container"] = "someone-elses-db"
    (workdir / "edited.plan").write_text(json.dumps(data))
    (workdir / "cut.plan").write_text((workdir / "restart.plan").read_text()[:300])
    for plan, code, says in (
        (
            "edited.plan",
            7,
            "was edited after kimik3 wrote it (what differs from the digests "
            f"saved with it: step {number} (<= health {step['target']})",
        ),
        ("cut.plan", 2, "a damaged kimik3 saved plan"),
    ):
        refused = kimik3(workdir, "apply", "--json", plan, check=False)
        error = json.loads(refused.stdout)["error"]  # stdout is the JSON document and nothing else
        assert refused.returncode == code == error["exit_code"] and says in error["message"], refused.stderr
        assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "exited"  # touched nothing
    kimik3(workdir, "apply", "restart.plan")  # the plan as saved still runs
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"


@pytest.mark.parametrize(
    "endpoint", [f"http://127.0.0.1:{CLOSED_PORT}", "http://k3-plan-hub.invalid:19198"], ids=["refused", "unresolvable"]
)
def test_an_unreachable_hub_exits_6_within_seconds_naming_its_url(
    tmp_path: Path, hub: FixtureHub, endpoint: str
) -> None:
    with socket.socket() as probe:  # the "closed" port must really be closed
        assert probe.connect_ex(("127.0.0.1", CLOSED_PORT)) != 0
    write_profile(tmp_path, demo_profile(tmp_path, "k3-plan-hub", 19151, endpoint))  # fresh state: the hub is asked
    started = time.monotonic()
    result = kimik3(tmp_path, "plan", "profile.yaml", check=False)
    elapsed = time.monotonic() - started
    assert result.returncode == 6, result.stderr
    assert f"hub {endpoint} not reachable" in result.stderr and "Retrying in" not in result.stderr
    assert elapsed < 8, f"{elapsed:.1f} s"
    print(f"{endpoint}: exit 6 in {elapsed:.2f} s: {result.stderr.strip()}")
    assert not exists("k3-plan-hub")


def test_the_host_gate_refuses_a_no_gpu_host_before_any_hub_request(tmp_path: Path) -> None:
    profile = demo_profile(tmp_path, "k3-plan-gpu", 19152, f"http://127.0.0.1:{CLOSED_PORT}")
    profile["build"]["variant"], profile["gpus"] = "cuda", "all"  # this machine has no NVIDIA driver
    write_profile(tmp_path, profile)
    started = time.monotonic()
    result = kimik3(tmp_path, "plan", "profile.yaml", check=False)
    assert result.returncode == 3, result.stderr
    assert "the host gate refuses this profile" in result.stderr and "0 GPUs on this host" in result.stderr
    assert "not reachable" not in result.stderr and time.monotonic() - started < 8
