"""Drift read from what runs, against the real dockerd and the CPU image: the adapter's launch read
back through the parser is the rendered container (a NOOP), and a container recreated by hand with
kimik3's labels but another argv, an extra env var or a writable weights mount plans a replacement
naming the field; apply restores it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.demo_work import converged_fixture
from support.realparts import (
    docker,
    kimik3,
    remove_leftovers,
    require_docker_and_demo_hub,
    serves,
    wait_for,
)

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.model.specs import ContainerSpec, Mount
from kimik3_reconciler.observe.docker_objects import parse_running
from kimik3_reconciler.planning.container_drift import running_drift

pytestmark = pytest.mark.docker

NAME = "k3-drift-argv"
PORT = 19201
IMAGE = "kimi-k3-llamacpp:mainline-ad1de39-cpu"


workdir = converged_fixture("drift", NAME, PORT)


def inspect(name: str) -> dict:
    return json.loads(docker("inspect", name))[0]


def test_the_rendered_container_run_by_the_adapter_reads_back_unchanged(tmp_path: Path) -> None:
    """run_container and parse_running are symmetric, for every field the launch sets."""
    require_docker_and_demo_hub()
    spec = ContainerSpec(
        name="k3-drift-roundtrip",
        image=IMAGE,
        command=("--version",),
        env=(("K3_DRIFT_TEST", "1"),),
        mounts=(Mount(str(tmp_path), "/models/m", read_only=True), Mount(str(tmp_path), "/scratch", read_only=False)),
        gpus="none",
        labels=(("kimik3.test", "drift"),),
        restart_policy="no",
        entrypoint=("/app/llama-server",),
    )
    engine = DockerEngine()
    remove_leftovers(spec.name)
    try:
        engine.run_container(spec)
        running = parse_running(inspect(spec.name), json.loads(docker("image", "inspect", IMAGE))[0])
        assert running_drift(spec, running) == ()
        assert running.env == (("K3_DRIFT_TEST", "1"),) and running.entrypoint is None  # the image's own
        assert [m.read_only for m in running.mounts] == [True, False]
    finally:
        subprocess.run(["docker", "rm", "-f", spec.name], capture_output=True)


def test_a_converged_container_plans_no_drift(workdir: Path) -> None:
    plan = json.loads(kimik3(workdir, "plan", "--json", "profile.yaml").stdout)
    container = next(s for s in plan["steps"] if s["kind"] == "container")
    assert (container["action"], container["diff"]) == ("noop", [])


def recreate_by_hand(extra: list[str], argv_edit: tuple[str, str] | None = None, writable: bool = False) -> None:
    """`docker run` the container again from its own inspect JSON, kimik3's labels kept, one thing changed."""
    found = inspect(NAME)
    config, host = found["Config"], found["HostConfig"]
    argv = list(config["Cmd"])
    if argv_edit:
        argv[argv.index(argv_edit[0]) + 1] = argv_edit[1]
    options = ["--network", host["NetworkMode"], "--ipc", host["IpcMode"], "--restart", host["RestartPolicy"]["Name"]]
    for key, value in config["Labels"].items():
        options += ["--label", f"{key}={value}"]
    for mount in found["Mounts"]:
        options += [
            "--mount",
            f"type=bind,src={mount['Source']},dst={mount['Destination']}" + ("" if writable else ",readonly"),
        ]
    docker("rm", "-f", NAME)
    docker("run", "-d", "--name", NAME, *options, *extra, config["Image"], *argv)
    # Serving again before the plan: a container still loading is not swapped behind a pre-read (nothing serves
    # to hide the read behind), and how far the load got by the time of the apply would decide the steps.
    wait_for("the recreated server to serve", lambda: serves(PORT), timeout=120)


@pytest.mark.parametrize(
    "change, field, shown",
    [
        (
            dict(argv_edit=("--ubatch-size", "512")),
            "container.command",
            ("… --ubatch-size 512 …", "… --ubatch-size 4096 …"),
        ),
        (
            dict(extra=["-e", "K3_DRIFT_BY_HAND=secret-value"]),
            "container.env.K3_DRIFT_BY_HAND",
            ("(sensitive value)", None),
        ),
        (dict(writable=True), "mount /models/models--kimik3-demo--Kimi-K3-tiny-GGUF", ("read-write", "read-only")),
    ],
    ids=["argv", "env", "writable-weights"],
)
def test_a_container_recreated_by_hand_is_replaced_naming_the_field(workdir: Path, change, field, shown) -> None:
    recreate_by_hand(change.pop("extra", []), **change)
    plan = kimik3(workdir, "plan", "--json", "profile.yaml")
    assert "secret-value" not in plan.stdout + plan.stderr
    container = next(s for s in json.loads(plan.stdout)["steps"] if s["kind"] == "container")
    assert container["action"] == "replace" and "changed outside kimik3" in container["reason"]
    assert [(d["field"], d["old"], d["new"]) for d in container["diff"]] == [(field, *shown)]
    applied = json.loads(kimik3(workdir, "apply", "--json", "profile.yaml").stdout)
    assert [(s["kind"], s["action"]) for s in applied["executed"]] == [
        ("preread", "read"),
        ("container", "replace"),
        ("health", "read"),
    ]
    restored = inspect(NAME)
    assert "--ubatch-size" in restored["Config"]["Cmd"] and "4096" in restored["Config"]["Cmd"]
    assert not any(e.startswith("K3_DRIFT_BY_HAND=") for e in restored["Config"]["Env"])
    assert all(not m["RW"] for m in restored["Mounts"])
    assert json.loads(kimik3(workdir, "plan", "--json", "profile.yaml").stdout)["converged"] is True
