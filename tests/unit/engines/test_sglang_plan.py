"""A plan of profiles/sglang-tp8.yaml (issue 25 §3) on described hosts: on 8x B300 the checkpoint, the pull by digest,
the launch and the health wait, with its route marked feasible; the host gate refuses, naming the sglang field, a
GB300 host (seed 001: do not copy the B300 topology there), too few GPUs for tp_size, and a driver below R580."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.observed import model_fact, observed
from support.shipped import pinned_text

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.described_host import described_host
from kimik3_reconciler.model.facts import HostFacts, PulledImageFact, RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning import plan

ROOT = Path(__file__).resolve().parents[3]
PROFILE = pinned_text(ROOT / "profiles" / "sglang-tp8.yaml")
B300 = yaml.safe_load((ROOT / "tests" / "fixtures" / "host" / "described-b300.yaml").read_text())
GIB = 1 << 30


def host(**changes: object) -> HostFacts:
    facts = described_host({**B300, **changes}, "host.yaml")
    return HostFacts.model_validate(
        {**facts.model_dump(), "physical_cores": 96, "numa_balancing": 0, "docker_gpus": True}
    )


def plan_on(facts: HostFacts, text: str = PROFILE):
    profile = parse_profile(text, "sglang-tp8.yaml").profile
    # A checkpoint of 1.6 TB of safetensors (above the 1.49 TB lower bound) and its config, all in the cache.
    files = tuple(
        RemoteFile(path=f"model-{i:05d}-of-00004.safetensors", size=400 * GIB, sha256=str(i) * 64) for i in range(1, 5)
    ) + (RemoteFile(path="config.json", size=4096, sha256="c" * 64),)
    ref = profile.image.ref
    return plan(
        profile,
        observed(
            profile,
            host=facts,
            model=model_fact(profile, quant="checkpoint", files=files),
            pulled=PulledImageFact(ref=ref, digest=ref.split("@")[1], pull_bytes=20 * GIB),
        ),
    )


def test_eight_b300_pull_launch_and_wait() -> None:
    result = plan_on(host())
    assert [(s.kind, s.action.name.lower()) for s in result.changes] == [
        ("image", "create"),
        ("container", "create"),
        ("health", "read"),
    ]
    launch = next(s for s in result.steps if s.kind == "container").spec
    assert (
        launch.container.command[:2] == ("sglang", "serve") and "--mamba-full-memory-ratio" in launch.container.command
    )
    ours = next(r for r in result.routes.routes if r.profile)
    assert (ours.engine, ours.placement, ours.feasible) == ("sglang", "tp8-dcp8", True)


@pytest.mark.parametrize(
    "changes, says",
    [
        (
            {"gpus": [{"name": "NVIDIA GB300", "count": 8, "memory_gib": 268}]},
            "are NVIDIA GB300, not B300 (seed 001: SGLang's Kimi-K3 cookbook, verified on 8x B300",
        ),
        (
            {"gpus": [{"name": "NVIDIA B300 SXM6 AC", "count": 4, "memory_gib": 268}]},
            "engine sglang runs 8 tensor-parallel ranks, one per GPU, but the profile gets 4 GPU(s) here",
        ),
        ({"driver": "575.57.08"}, "NVIDIA driver 575.57.08 is older than 580"),
    ],
)
def test_the_gate_refuses_naming_the_sglang_field(changes: dict, says: str) -> None:
    with pytest.raises(PlanError, match=says.replace("(", r"\(").replace(")", r"\)")) as refused:
        plan_on(host(**changes))
    if "GB300" in says:
        assert ("sglang", "any_gpu") in refused.value.fields
    if "ranks" in says:
        assert ("sglang", "tp_size") in refused.value.fields


def test_any_gpu_lets_the_operator_run_it_on_gb300() -> None:
    text = PROFILE.replace("  tp_size: 8\n", "  tp_size: 8\n  any_gpu: true\n")
    result = plan_on(host(gpus=[{"name": "NVIDIA GB300", "count": 8, "memory_gib": 268}]), text)
    assert any(s.kind == "container" for s in result.changes)


def test_the_launch_says_sglang_answers_the_seeds_model_name_too() -> None:
    """Issue 38 item 5: SGLang 0.5.23 takes one --served-model-name (a str), and its OpenAI routes do not compare a
    request's `model` with it, so seed 001's `model: moonshotai/Kimi-K3` is answered; the plan says so."""
    result = plan_on(host())
    step = next(s for s in result.steps if s.kind == "container")
    command = step.spec.container.command
    assert command[command.index("--served-model-name") + 1 :][:2] == ("kimi-k3", "--enable-metrics")
    assert step.reason.endswith("answers to model kimi-k3 (and any other name: sglang serve does not check it)")
