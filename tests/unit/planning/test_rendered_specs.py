"""Golden files of what the planner renders for each example profile: container argv/env/mounts/GPUs
and the Dockerfile build args. Regenerate with KIMIK3_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
from support.observed import local_inputs, observed
from support.shipped import pinned_text

from kimik3_reconciler.engines.llamacpp.image import render_image_build
from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.local_inputs import parse_unified_diff
from kimik3_reconciler.planning.launch import render_launch

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden"
# llama.cpp's example profiles (built image, GGUF quant): vllm-tp8.yaml has its own golden render (test_vllm_render.py).
PROFILES = sorted(
    p
    for p in (ROOT / "profiles").glob("*.yaml")
    if "\nengine: " not in p.read_text() and "\nkind: Fleet" not in p.read_text()
)
# A recorded-shape host: 16 physical cores with AVX-512 and AMX (an H200 host's lscpu, TESTING.md §7).
HOST = HostFacts(physical_cores=16, cpu_flags=("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512f"))


ROLLBACK_SHAPED = ROOT / "tests" / "fixtures" / "patches" / "recurrent-rollback-shaped.patch"


def observed_for(path: Path):
    """The profile on the H200-like host; its patches (not public) read as the rollback-shaped fixture."""
    profile = parse_profile(pinned_text(path), path.name).profile
    inputs = local_inputs(profile)
    files = parse_unified_diff(ROLLBACK_SHAPED.read_text())
    inputs = inputs.model_copy(update={"patches": tuple(p.model_copy(update={"files": files}) for p in inputs.patches)})
    return profile, observed(profile, host=HOST, inputs=inputs)


def rendered(path: Path) -> dict:
    profile, observed = observed_for(path)
    image = render_image_build(profile, observed)
    launch = render_launch(profile, observed, image.tag, image.fingerprint)
    spec = asdict(launch.spec)
    spec["labels"] = sorted(k for k, _ in launch.spec.labels)  # values hold fingerprints: names suffice
    return {
        "image": {"tag": image.tag, "build_args": dict(image.build_args)},
        "container": spec,
        "health_url": launch.health_url,
        "warnings": list(launch.warnings),
    }


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_rendered_spec_matches_golden(path: Path) -> None:
    got = json.dumps(rendered(path), indent=1, sort_keys=True) + "\n"
    golden = GOLDEN / f"{path.stem}.json"
    if os.environ.get("KIMIK3_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert golden.read_text() == got


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_seed_rules_hold_in_every_rendered_container(path: Path) -> None:
    profile, _ = observed_for(path)
    spec = rendered(path)["container"]
    argv = spec["command"]
    pairs = dict(zip(argv, argv[1:]))
    # Fixed by seed 000: not knobs.
    assert pairs["--numa"] == "distribute" and pairs["--load-mode"] == "none"
    assert pairs["--cache-type-k"] == pairs["--cache-type-v"] == "f16"
    assert pairs["--threads"] == pairs["--threads-batch"] == "16"
    assert ("--mmproj" in argv) == (profile.build.source == "fork" and profile.model.mmproj is not None)
    assert all(m["read_only"] for m in spec["mounts"])
    assert spec["network_mode"] == "host" and spec["ipc_mode"] == "host"
    if profile.serve.api_key_file:
        assert pairs["--api-key-file"] == "/run/secrets/kimik3-api-key"
    assert "--api-key" not in argv
    if profile.serve.spec_draft:
        # The draft sits on the GPU holding output.weight: the last of the split (seed 000).
        assert pairs["--spec-draft-device"] == f"CUDA{len(profile.gpus) - 1}"
        assert pairs["--spec-draft-model"].startswith("/drafts/") and "--spec-type" in pairs
    if profile.serve.host == "loopback":
        assert pairs["--host"] == "127.0.0.1"


def test_fingerprints_are_stable() -> None:
    """A changed fingerprint replaces every running container (a ~17-minute reload on a real host) and
    rebuilds every image: only a change to what is launched or built may move them, never a refactor.
    Update tests/golden/fingerprints.json only together with a change to the rendered argv/mounts/build."""
    want = json.loads((GOLDEN / "fingerprints.json").read_text())
    got = {}
    for path in PROFILES:
        profile, observed = observed_for(path)
        image = render_image_build(profile, observed)
        launch = render_launch(profile, observed, image.tag, image.fingerprint)
        got[path.stem] = {"image": image.fingerprint, "container": launch.fingerprint}
    assert got == want


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_plan_json_shows_the_rendered_container_whether_or_not_it_changes(path: Path) -> None:
    """GitOps CI reads `plan --json`: the container step's spec is the rendered container (argv, mounts,
    GPUs), on a fresh host (create) and on a converged one (NOOP) alike."""
    from kimik3_reconciler.model.facts import ContainerFact, SystemdFacts
    from kimik3_reconciler.planning import plan

    profile, facts = observed_for(path)
    facts = facts.model_copy(
        update={"systemd": SystemdFacts(booted=True, state="running", docker_cli="/usr/bin/docker")}
    )
    golden = json.loads((GOLDEN / f"{path.stem}.json").read_text())["container"]
    fresh = plan(profile, facts).to_json()
    image = render_image_build(profile, facts)
    launch = render_launch(profile, facts, image.tag, image.fingerprint)
    running = facts.model_copy(
        update={
            "container": ContainerFact(
                id="c" * 64,
                name=profile.name,
                state="running",
                fingerprint=launch.fingerprint,
                inputs=launch.inputs,
                health="ok",
            )
        }
    )
    converged = plan(profile, running).to_json()
    for result, action, replace in ((fresh, "create", False), (converged, "noop", False)):
        step = next(s for s in result["steps"] if s["kind"] == "container")
        assert step["action"] == action
        assert step["spec"]["command"] == golden["command"] and step["spec"]["gpus"] == golden["gpus"]
        assert step["spec"]["replace"] is replace


def test_load_mode_dio_renders_in_place_of_none_and_moves_the_fingerprint() -> None:
    """serve.load_mode reaches argv at the fixed flags' place; `none` (the default) is today's argv, so no
    running container is replaced by the upgrade, while `dio` is a launch input like any other."""
    path = ROOT / "profiles" / "demo-cpu.yaml"
    profile, obs = observed_for(path)
    dio = profile.model_copy(update={"serve": profile.serve.model_copy(update={"load_mode": "dio"})})
    image = render_image_build(profile, obs)
    none_launch = render_launch(profile, obs, image.tag, image.fingerprint)
    dio_launch = render_launch(dio, obs, image.tag, image.fingerprint)
    argv = list(dio_launch.spec.command)
    assert argv[argv.index("--load-mode") + 1] == "dio"
    assert list(none_launch.spec.command) == [a if a != "dio" else "none" for a in argv]
    assert none_launch.fingerprint != dio_launch.fingerprint
    assert dio_launch.inputs["serve.load_mode"] == "dio"
