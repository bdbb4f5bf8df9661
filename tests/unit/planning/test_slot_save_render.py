"""serve.slot_save (a fleet rollout's warm step, fleet/warm.py): llama-server's --slot-save-path in a Docker volume
that outlives the container, only where the profile asks; off, every rendered container and label is as before."""

from __future__ import annotations

import json
from pathlib import Path

from support.observed import observed
from support.shipped import pinned_text

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.llamacpp.image import render_image_build
from kimik3_reconciler.model.labels import CONTAINER_INPUTS
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.launch import render_launch

ROOT = Path(__file__).resolve().parents[3]


def _launch(slot_save: bool | None, engine_profile: str = "demo-cpu.yaml"):
    text = pinned_text(ROOT / "profiles" / engine_profile)
    if slot_save is not None:
        text = text.replace("\nserve:\n", f"\nserve:\n  slot_save: {str(slot_save).lower()}\n", 1)
    profile = parse_profile(text, engine_profile).profile
    facts = observed(profile)
    image = render_image_build(profile, facts) if profile.engine == "llamacpp" else None
    return render_launch(profile, facts, image.tag if image else "img", image.fingerprint if image else "fp")


def test_slot_save_adds_the_flag_and_a_volume_named_for_the_deployment() -> None:
    launch = _launch(True)
    argv = launch.spec.command
    assert argv[argv.index("--slot-save-path") + 1] == "/slots"
    assert launch.spec.volumes == ((f"kimik3-slots-{launch.input.name}", "/slots"),)
    assert json.loads(dict(launch.spec.labels)[CONTAINER_INPUTS])["serve.slot_save"] is True


def test_slot_save_off_keeps_the_container_its_fingerprint_and_its_label() -> None:
    """Written false or left out: the same container as a profile written before the field (no replace)."""
    unset, off, on = _launch(None), _launch(False), _launch(True)
    assert unset.fingerprint == off.fingerprint != on.fingerprint
    assert "--slot-save-path" not in off.spec.command and off.spec.volumes == ()
    assert "serve.slot_save" not in json.loads(dict(off.spec.labels)[CONTAINER_INPUTS])


def test_the_engine_seam_says_who_saves_slots() -> None:
    assert engine_for("llamacpp").slot_store.flag == "--slot-save-path"
    assert engine_for("vllm").slot_store is None and engine_for("sglang").slot_store is None
