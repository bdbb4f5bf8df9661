"""`destroy` forgets the revert target (issue 30, item 4), on real parts (the real `kimik3`, dockerd, the demo's CPU
image and tiny model): after `destroy`, an apply of that profile that cannot load brings back nothing, where it
used to relaunch the destroyed deployment from `last-good/<name>.json`. And the volume of a deployment's saved
slots (serve.slot_save): `destroy` keeps it and names it, `destroy --slots` removes it.

Names and ports are this module's own (k3-destroyed, 19331; k3-destroy-slots, 19332): other developers share the
daemon.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import truncated_hub
from support.realparts import (
    demo_hub,
    demo_profile,
    docker,
    kimik3,
    remove_leftovers,
    serves,
    write_profile,
)

from kimik3_demo.hub import FixtureHub
from kimik3_reconciler.model.specs import slots_volume

pytestmark = pytest.mark.docker

NAME, PORT = "k3-destroyed", 19331
SLOTS_NAME, SLOTS_PORT = "k3-destroy-slots", 19332


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[FixtureHub]:
    """The demo repo plus UD-TRUNC: one shard cut to a third, which downloads and verifies but cannot load."""
    remove_leftovers(NAME)
    with truncated_hub(tmp_path) as running:
        yield running
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


def test_a_failing_apply_after_destroy_does_not_bring_the_destroyed_deployment_back(
    tmp_path: Path, hub: FixtureHub
) -> None:
    good = demo_profile(tmp_path, NAME, PORT, hub.url)
    write_profile(tmp_path, good, "good.yaml")
    kimik3(tmp_path, "apply", "good.yaml")
    last_good = tmp_path / "state" / "last-good" / f"{NAME}.json"
    assert last_good.exists() and serves(PORT)
    shown = json.loads(kimik3(tmp_path, "destroy", "--dry-run", "--json", "good.yaml").stdout)
    forget = [s for s in shown["steps"] if s["kind"] == "records"]
    assert forget and forget[0]["action"] == "delete" and "last good profile" in forget[0]["reason"]
    assert last_good.exists()  # a dry run forgets nothing
    kimik3(tmp_path, "destroy", "good.yaml")
    assert not last_good.exists()
    assert subprocess.run(["docker", "inspect", NAME], capture_output=True).returncode != 0
    bad = {**good, "model": {**good["model"], "quant": "UD-TRUNC"}}
    write_profile(tmp_path, bad, "bad.yaml")
    result = kimik3(tmp_path, "apply", "bad.yaml", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "could not be read" in result.stderr and "reverted" not in result.stderr
    # The failed launch is stopped (kept for its logs); the destroyed deployment was not relaunched.
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "exited" and not serves(PORT)
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    assert "UD-TRUNC" in argv[argv.index("-m") + 1]


def _volume_exists(name: str) -> bool:
    return subprocess.run(["docker", "volume", "inspect", name], capture_output=True).returncode == 0


def test_destroy_keeps_the_saved_slots_volume_and_destroy_slots_removes_it(tmp_path: Path) -> None:
    volume = slots_volume(SLOTS_NAME)
    remove_leftovers(SLOTS_NAME)
    subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)
    try:
        with demo_hub() as hub:
            profile = demo_profile(tmp_path, SLOTS_NAME, SLOTS_PORT, hub.url)
            profile["serve"].update(slot_save=True)
            write_profile(tmp_path, profile)
            kimik3(tmp_path, "apply", "profile.yaml", "--no-verify-server")
        assert serves(SLOTS_PORT) and _volume_exists(volume)
        kept = kimik3(tmp_path, "destroy", "profile.yaml")
        assert subprocess.run(["docker", "inspect", SLOTS_NAME], capture_output=True).returncode != 0
        assert _volume_exists(volume)
        said = " ".join(kept.stdout.split())  # the plan's table wraps the reason
        assert volume in said and f"pass --slots to remove, or `docker volume rm {volume}`" in said, kept.stdout
        shown = json.loads(kimik3(tmp_path, "destroy", "--slots", "--dry-run", "--json", "profile.yaml").stdout)
        step = next(s for s in shown["steps"] if s["kind"] == "slots")
        assert (step["target"], step["action"]) == (volume, "delete") and _volume_exists(volume)
        kimik3(tmp_path, "destroy", "--slots", "profile.yaml")
        assert not _volume_exists(volume)
        again = json.loads(kimik3(tmp_path, "destroy", "--slots", "--json", "profile.yaml").stdout)
        assert not [s for s in again["steps"] if s["kind"] == "slots"]
    finally:
        subprocess.run(["docker", "rm", "-f", SLOTS_NAME], capture_output=True)
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)
