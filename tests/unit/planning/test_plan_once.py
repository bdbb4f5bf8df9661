"""One plan renders what it is made of once (issue 37 item 1): the engine's plan (its mode, hybrid or all-VRAM, and
its forecast) is rendered once for the profile on this observation, and the gate, the launch, the forecast and the
profile's own route read it; the plan's host gate runs once for the profile (its own route takes that verdict:
planning/routes.py). The other routes are other profiles (another quant, another engine): each is rendered and
judged once, so the sizing is entered a bounded number of times, not once per question."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from support.observed import model_fact, observed
from support.recorded_hosts import seed000_host
from support.shipped import pinned_text

from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning import plan

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30


def test_one_plan_renders_the_engine_plan_once_and_runs_its_gate_once() -> None:
    profile = parse_profile(pinned_text(ROOT / "profiles" / "hybrid-q2.yaml"), "hybrid-q2.yaml").profile
    profile = profile.model_copy(update={"systemd": None})  # no systemd observed in a pure test
    files = tuple(
        RemoteFile(path=f"UD-Q2_K_XL/K-UD-Q2_K_XL-0000{i}-of-00004.gguf", size=200 * GIB, sha256=str(i) * 64)
        for i in range(1, 5)
    )
    facts = observed(profile, host=seed000_host(8), model=model_fact(profile, files=files))
    renders: list[tuple[int, int]] = []  # (profile, observation) of each engine plan rendered
    derived: list[tuple[int, int]] = []  # and of each mode derived
    entries = 0  # calls into engines/llamacpp/vram_fit.py from outside it
    kept: list[Any] = []  # the profiles and observations, kept alive: their ids are compared
    gates = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal entries
        if event != "call":
            return
        code, local = frame.f_code, frame.f_locals
        asked = (id(local.get("profile")), id(local.get("observed")))
        if code.co_name == "render_plan" and "/engines/" in code.co_filename:
            renders.append(asked)
            kept.extend((local.get("profile"), local.get("observed")))
        if code.co_name == "derive_mode":
            derived.append(asked)
        if code.co_filename.endswith("vram_fit.py") and not frame.f_back.f_code.co_filename.endswith("vram_fit.py"):
            entries += 1
        if code.co_name == "host_gate" and local.get("profile") is profile and local.get("observed") is facts:
            gates.append(code.co_filename)

    sys.setprofile(hook)
    try:
        result = plan(profile, facts)
    finally:
        sys.setprofile(None)
    ours = (id(profile), id(facts))
    assert renders.count(ours) == 1, renders  # the plan's own engine plan: rendered once, read by all
    assert derived.count(ours) == 1, derived
    assert len(renders) == len(set(renders)) and len(derived) == len(set(derived))  # no profile sized twice
    judged = [r for r in result.routes.routes if r.engine == profile.engine and r.placement != "-"]
    assert len(derived) <= len(judged)  # one derivation per route judged, the profile's own among them
    # Each render enters the sizing module a fixed number of times (mode, context, forecast): on main before this
    # change one plan entered it 80 times (bench/plan_once.py), the memo answering repeated questions.
    assert entries <= 9 * len(renders), entries  # 49 for 6 renders here
    assert len(gates) == 1, gates
    mine = next(r for r in result.routes.routes if r.profile)
    assert mine.feasible and mine.placement == "hybrid"
