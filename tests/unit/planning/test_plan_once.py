"""One plan derives what it is made of once (issue 37 item 1): the mode (hybrid or all-VRAM) of the profile on this
observation is one decision, whichever of the gate, the launch, the forecast and the routes asks; the plan's host gate
runs once for the profile (its own route takes that verdict: planning/routes.py)."""

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


def test_one_plan_makes_one_mode_decision_and_runs_its_gate_once() -> None:
    profile = parse_profile(pinned_text(ROOT / "profiles" / "hybrid-q2.yaml"), "hybrid-q2.yaml").profile
    profile = profile.model_copy(update={"systemd": None})  # no systemd observed in a pure test
    files = tuple(
        RemoteFile(path=f"UD-Q2_K_XL/K-UD-Q2_K_XL-0000{i}-of-00004.gguf", size=200 * GIB, sha256=str(i) * 64)
        for i in range(1, 5)
    )
    facts = observed(profile, host=seed000_host(8), model=model_fact(profile, files=files))
    decisions: list[Any] = []  # kept alive: ids are compared
    gates = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        local = frame.f_locals
        if local.get("profile") is not profile or local.get("observed") is not facts:
            return
        if event == "return" and frame.f_code.co_name == "derive_mode":
            decisions.append(arg)
        if event == "call" and frame.f_code.co_name == "host_gate":
            gates.append(frame.f_code.co_filename)

    sys.setprofile(hook)
    try:
        result = plan(profile, facts)
    finally:
        sys.setprofile(None)
    assert len(decisions) >= 2  # asked by several planners
    assert len({id(d) for d in decisions}) == 1, decisions  # one decision, made once
    assert decisions[0].mode == "hybrid"
    assert len(gates) == 1, gates
    ours = next(r for r in result.routes.routes if r.profile)
    assert ours.feasible and ours.placement == "hybrid"
