"""`destroy` forgets the revert target (issue 30, item 4), on real parts (the real `kimik3`, dockerd, the demo's CPU
image and tiny model): after `destroy`, an apply of that profile that cannot load brings back nothing, where it
used to relaunch the destroyed deployment from `last-good/<name>.json`.

Names and ports are this module's own (k3-destroyed, 19331): other developers share the daemon.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import truncated_hub
from support.realparts import (
    demo_profile,
    docker,
    kimik3,
    remove_leftovers,
    serves,
    write_profile,
)

from kimik3_demo.hub import FixtureHub

pytestmark = pytest.mark.docker

NAME, PORT = "k3-destroyed", 19331


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
