"""Which running containers of other profiles must stop first (seed 000 step 7: shared GPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3_reconciler.model.facts import ContainerFact
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.conflict_step import why_conflicting

ROOT = Path(__file__).resolve().parents[3]


def other(profile: str, gpus: object, port: int = 9999) -> ContainerFact:
    return ContainerFact(
        id="x" * 64, name=profile, state="running", profile=profile, inputs={"gpus": gpus, "serve.port": port}
    )


@pytest.mark.parametrize(
    ("gpus", "port", "why"),
    [
        ("all", 9999, "holds GPUs all"),
        ([6, 7], 9999, "holds GPUs ['6', '7']"),
        ([8, 9], 9999, None),
        ("none", 8080, "listens on port 8080"),
        ("none", 9999, None),
    ],
)
def test_gpu_overlap_and_port(gpus: object, port: int, why: str | None) -> None:
    interactive = parse_profile((ROOT / "profiles" / "interactive.yaml").read_text()).profile
    found = why_conflicting(interactive.model_copy(update={"systemd": None}), other("someone", gpus, port), 8080)
    assert (found is None) if why is None else (why in found)


def test_a_renamed_copy_of_this_profiles_container_is_not_promised_a_restart() -> None:
    from support.observed import observed

    from kimik3_reconciler.planning import render_desired
    from kimik3_reconciler.planning.conflict_step import plan_conflicts

    hybrid = parse_profile((ROOT / "profiles" / "hybrid-q2.yaml").read_text()).profile
    renamed = other(hybrid.name, "all").model_copy(update={"name": "k3-old"})
    someone = other("someone", "all").model_copy(update={"name": "someone"})
    obs = observed(hybrid).model_copy(update={"others": (renamed, someone)})
    steps = {s.target: s.reason for s in plan_conflicts(render_desired(hybrid, obs), obs)}
    assert "`docker rm k3-old` removes it" in steps["k3-old"] and "starts it again" not in steps["k3-old"]
    assert "`kimik3 apply` of that profile starts it again" in steps["someone"]


def test_explicit_systemd_conflicts() -> None:
    main = parse_profile((ROOT / "profiles" / "hybrid-q2.yaml").read_text()).profile
    assert "systemd.conflicts lists kimi-k3-interactive" == why_conflicting(
        main, other("kimi-k3-interactive", "none", 1), 8080
    )


def test_draft_device_is_derived_from_the_gpu_subset() -> None:
    from kimik3_reconciler.engines.llamacpp.drafts import draft_device
    from kimik3_reconciler.errors import PlanError

    base = parse_profile((ROOT / "profiles" / "interactive.yaml").read_text()).profile
    draft = base.serve.spec_draft.model_copy(update={"device": "auto"})
    subset = base.model_copy(update={"gpus": [2, 5, 6], "serve": base.serve.model_copy(update={"spec_draft": draft})})
    assert draft_device(subset) == "CUDA2"  # the container sees GPUs 2,5,6 as CUDA0..CUDA2
    with pytest.raises(PlanError, match="auto needs the GPU count"):
        draft_device(subset.model_copy(update={"gpus": "all"}))


def test_draft_device_with_gpus_all_comes_from_the_host_gpu_count() -> None:
    from kimik3_reconciler.engines.llamacpp.drafts import draft_device

    base = parse_profile((ROOT / "profiles" / "interactive.yaml").read_text()).profile
    draft = base.serve.spec_draft.model_copy(update={"device": "auto"})
    everything = base.model_copy(update={"gpus": "all", "serve": base.serve.model_copy(update={"spec_draft": draft})})
    assert draft_device(everything, host_gpus=8) == "CUDA7"
