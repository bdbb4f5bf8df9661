"""A launch whose apply died before its verify, against the real parts (dockerd, the demo's CPU image, the fixture
hub): the next plan holds `<= verify` (`--detailed-exitcode` exits 4), `apply` runs just that verify, and the plan
after it is converged (exit 0). Own name and port: k3un-unverified, 18620."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from support.background import Background
from support.realparts import demo_hub, demo_profile, docker, kimik3, serves, wait_for, write_profile

pytestmark = pytest.mark.docker

NAME, PORT = "k3un-unverified", 18620


def test_a_launch_left_unverified_is_a_verify_step_that_the_next_apply_runs(
    tmp_path: Path, background: Background
) -> None:
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    with demo_hub() as hub:
        write_profile(tmp_path, demo_profile(tmp_path, NAME, PORT, hub.url))
        try:
            apply = background.kimik3(tmp_path, "apply", "profile.yaml", HF_HOME=str(tmp_path / "hf-home"))
            record = tmp_path / "state" / "unverified" / f"{NAME}.json"
            wait_for(
                "the launch", lambda: docker("ps", "-q", "--filter", f"name=^{NAME}$") != "", timeout=300, interval=0.1
            )
            docker("pause", NAME)  # hold the load: the apply cannot get past its health wait meanwhile
            assert record.exists()  # written before the launch
            os.kill(apply.pid, signal.SIGKILL)  # the apply dies in its health wait: nobody verifies this launch
            apply.communicate()
            docker("unpause", NAME)
            wait_for("the load", lambda: serves(PORT), timeout=120, interval=0.1)
            owed = kimik3(tmp_path, "plan", "profile.yaml", "--detailed-exitcode", check=False)
            assert owed.returncode == 4, owed.stderr[-2000:]
            assert "<= verify" in owed.stdout and "launched by an apply that did not verify it" in owed.stdout
            applied = json.loads(kimik3(tmp_path, "apply", "--json", "profile.yaml").stdout)
            assert [(s["kind"], s["action"]) for s in applied["executed"]] == [("verify", "read")]
            assert applied["verify"]["ok"] is True and not record.exists()
            done = kimik3(tmp_path, "plan", "profile.yaml", "--detailed-exitcode", check=False)
            assert done.returncode == 0, done.stdout
        finally:
            subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
