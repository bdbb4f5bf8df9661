"""Issue 30 item 3 against the real parts (the real `kimik3`, the fixture hub, huggingface_hub's cache layout,
dockerd and the demo image): two profiles of the demo quant that differ only in `model.cache_dir`, applied in turn
on one state dir. After each location's first apply, a plan of either finds its model verified ("all N files
verified", NOOP), never "changed since verified (re-hashed ...)": the bytes are not read again at each switch
(the unit test tests/unit/orchestrator/test_model_locations.py counts them through HostPort.file_digest).

Names and ports are this module's own (k3ml-*, 19372)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import fresh_work
from support.realparts import demo_profile, kimik3, write_profile

from kimik3_demo.hub import FixtureHub

pytestmark = pytest.mark.docker

NAME, PORT = "k3ml-locations", 19372


@pytest.fixture(scope="module")
def two_locations(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = fresh_work(tmp_path_factory, "kimik3-locations", NAME)
    for which in ("a", "b"):
        profile = demo_profile(work, NAME, PORT, hub.url)
        profile["model"]["cache_dir"] = str(work / f"cache-{which}")
        write_profile(work, profile, f"profile-{which}.yaml")
    try:
        kimik3(work, "apply", "profile-a.yaml", "--no-verify-server")
        kimik3(work, "apply", "profile-b.yaml", "--no-verify-server")  # the first visit of b: fetched there once
        yield work
    finally:
        kimik3(work, "destroy", "profile-b.yaml", check=False)
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


def model_step(work: Path, which: str) -> dict:
    plan = json.loads(kimik3(work, "plan", "--json", f"profile-{which}.yaml").stdout)
    return next(s for s in plan["steps"] if s["kind"] == "model")


def test_switching_cache_dirs_back_and_forth_finds_each_verified(two_locations: Path) -> None:
    work = two_locations
    for which in ("a", "b", "a"):
        step = model_step(work, which)
        print(f"plan {which}: {step['action']}: {step['reason']}")
        assert step["action"] == "noop" and step["reason"].startswith("all 2 files verified"), step
        kimik3(work, "apply", f"profile-{which}.yaml", "--no-verify-server")
    records = sorted((work / "state" / "models").rglob("UD-Q2_K_XL@*.json"))
    assert {json.loads(r.read_text())["cache_dir"] for r in records} == {str(work / "cache-a"), str(work / "cache-b")}
