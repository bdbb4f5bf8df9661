"""The model names a deployment answers to (issue 38 item 5): seed 001's client examples send
`model: moonshotai/Kimi-K3`, and kimik3's vLLM served only the profile's name. vLLM now serves both (the profile's
name first: verify, bench and the exporter ask for it); `status` says the names the running container was launched
with, read from its argv, so a container an older kimik3 launched is not said to answer a name it refuses."""

from __future__ import annotations

import json
from pathlib import Path

from support.observed import observed
from support.shipped import pinned_text

from kimik3_reconciler.model.facts import ContainerFact, RunningConfig
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.launch import served_names_in
from kimik3_reconciler.render import render_status

ROOT = Path(__file__).resolve().parents[3]


class Lines:
    """A console that keeps what is printed, one string a line."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, *objects: object, **_: object) -> None:
        self.lines.append(" ".join(getattr(o, "plain", str(o)) for o in objects))


def _status(profile_file: str, argv: tuple[str, ...]) -> list[str]:
    profile = parse_profile(pinned_text(ROOT / "profiles" / profile_file), profile_file).profile
    container = ContainerFact(
        id="c" * 64,
        name=profile.name,
        state="running",
        health="ok",
        running=RunningConfig(image=profile.image.ref or "", command=argv),
    )
    console = Lines()
    render_status(profile, observed(profile, container=container), None, False, console)
    return console.lines


def test_status_says_the_names_the_running_vllm_answers_to() -> None:
    argv = ("--model", "/models/x", "--served-model-name", "kimi-k3", "moonshotai/Kimi-K3", "--host", "127.0.0.1")
    assert "model name answers to model kimi-k3 or moonshotai/Kimi-K3" in _status("vllm-tp8.yaml", argv)
    # launched by a kimik3 before this change: its one name, as it is (the next apply relaunches it with both)
    older = ("--model", "/models/x", "--served-model-name", "kimi-k3", "--host", "127.0.0.1")
    assert "model name answers to model kimi-k3" in _status("vllm-tp8.yaml", older)


def test_status_says_sglang_answers_any_name() -> None:
    argv = ("sglang", "serve", "--served-model-name", "kimi-k3", "--enable-metrics")
    assert "model name answers to model kimi-k3 (and any other name: sglang serve does not check it)" in _status(
        "sglang-tp8.yaml", argv
    )


def test_names_are_read_up_to_the_next_flag_or_the_end() -> None:
    assert served_names_in(("--served-model-name", "a", "b/c"), "--served-model-name") == ("a", "b/c")
    assert served_names_in(("--alias", "k3", "--jinja"), "--alias") == ("k3",)
    assert served_names_in(("--port", "8000"), "--served-model-name") == ()


def test_a_vllm_container_an_older_kimik3_launched_is_replaced_naming_the_served_names() -> None:
    """Upgrading kimik3 moves a vLLM container's argv (the second name): the plan's reason and diff say so, not
    "container was not made by this kimik3 profile", which sends an operator looking for who else made it."""
    from support.observed import model_fact
    from test_sglang_plan import host

    from kimik3_reconciler.model.facts import PulledImageFact, RemoteFile
    from kimik3_reconciler.planning import plan

    profile = parse_profile(pinned_text(ROOT / "profiles" / "vllm-tp8.yaml"), "vllm-tp8.yaml").profile
    files = (
        RemoteFile(path="model-00001-of-00001.safetensors", size=1 << 40, sha256="1" * 64),
        RemoteFile(path="config.json", size=4096, sha256="c" * 64),
    )
    ref = profile.image.ref or ""
    seen = observed(
        profile,
        host=host(),
        model=model_fact(profile, quant="checkpoint", files=files),
        pulled=PulledImageFact(ref=ref, digest=ref.split("@")[1], pull_bytes=1 << 30),
    )
    launch = next(s for s in plan(profile, seen).steps if s.kind == "container").spec.container
    inputs = json.loads(dict(launch.labels)["kimik3.inputs"])
    older = {k: v for k, v in inputs.items() if k != "served_names"}  # an older kimik3's label: no such input
    container = ContainerFact(
        id="c" * 64,
        name=profile.name,
        state="running",
        health="ok",
        image=ref,
        fingerprint="73ec316473788f27",
        inputs=older,
        profile=profile.name,
    )
    step = next(
        s for s in plan(profile, seen.model_copy(update={"container": container})).steps if s.kind == "container"
    )
    assert step.reason.startswith("launch inputs changed (fingerprint 73ec316473788f27 → ")
    assert [(d.field, d.old, d.new) for d in step.diff] == [("served_names", None, ["kimi-k3", "moonshotai/Kimi-K3"])]
