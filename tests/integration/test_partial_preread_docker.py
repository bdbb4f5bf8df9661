"""Issue 27 item 6 against real parts: a knob change on the demo whose model does not fit the page cache beside the
reserve (MemAvailable forced small: tests/support/forced_memavailable.py; the 2.4 MB demo model fits any real host)
pre-reads only what fits, the first file of the model, while the old server still serves; then the real
llama-server's own block-layer count shows it read the rest, and only the rest, from storage.

Only the test's own files are evicted (posix_fadvise DONTNEED), never the shared machine's page cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.demo_work import converged_fixture
from support.page_cache_reads import evict
from support.realparts import docker, write_profile

from kimik3_reconciler.planning.preread_step import PAGE, reserve_bytes

pytestmark = pytest.mark.docker

NAME = "k3lt-preread27"
PORT = 19527
FORCED = Path(__file__).resolve().parents[1] / "support" / "forced_memavailable.py"


work = converged_fixture("k3lt-preread27", NAME, PORT)


def kimik3_with(available: int, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "state"), "HF_HOME": str(work / "hf-home")}
    result = subprocess.run(
        [sys.executable, str(FORCED), str(available), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=3600,
    )
    assert result.returncode == 0, (
        f"kimik3 {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result


def mem_total() -> int:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def test_a_swap_that_does_not_fit_prereads_the_first_file_and_the_load_reads_the_rest(work: Path) -> None:
    profile = yaml.safe_load((work / "profile.yaml").read_text())
    profile["serve"]["parallel"] = 3
    write_profile(work, profile, "partial.yaml")
    probe = json.loads(kimik3_with(mem_total(), work, "plan", "--json", "partial.yaml").stdout)
    files = [Path(p) for p in next(s for s in probe["steps"] if s["kind"] == "preread")["spec"]["files"]]
    sizes = [p.stat().st_size for p in files]
    total = sum(sizes)
    # MemAvailable as if the reserve and the first file (to its last whole page) were all the page cache could keep
    # beside the server; /proc/meminfo counts in kB: half a page more keeps the cut where it is meant
    first = sizes[0] - sizes[0] % PAGE
    available = reserve_bytes(mem_total()) + first + PAGE // 2

    plan = json.loads(kimik3_with(available, work, "plan", "--json", "partial.yaml").stdout)
    steps = {s["kind"]: s for s in plan["steps"]}
    preread = steps["preread"]
    assert preread["action"] == "read" and "pre-read part of the model" in preread["reason"], preread
    assert preread["spec"]["limit_bytes"] == first and f"{files[0].name} up to" in preread["reason"], preread
    assert f"{len(files) - 1} file(s) not at all" in preread["reason"]
    assert "predicted downtime" in preread["cost"] and "partial pre-read" in steps["health"]["cost"]

    rates = {p.name: p.read_text() for p in (work / "state" / "host").glob("load-rate*.json")}
    evict(files)
    before = docker("inspect", "-f", "{{.Id}}", NAME)
    applied = kimik3_with(available, work, "apply", "--json", "partial.yaml")
    log = [json.loads(line) for line in applied.stderr.splitlines() if line.startswith("{")]
    names = [e["event"] for e in log]
    event = next(e for e in log if e["event"] == "pre-read")
    assert event["files"] == 1 and event["resident"] == "100.0 %" and names.index("pre-read") < names.index("removed")
    assert event["limit_gib"] == round(first / (1 << 30), 2)
    assert docker("inspect", "-f", "{{.Id}}", NAME) != before
    # The real server read the whole model; storage gave it the files that were not pre-read, not the first one.
    healthy = next(e for e in log if e["event"] == "healthy")
    assert healthy["read_bytes"] >= total, healthy
    assert total - sizes[0] <= healthy["from_storage_bytes"] < total - sizes[0] // 2, (healthy, sizes)
    # Neither cold nor warm: the load rates the next plan predicts from stay as they were.
    assert "load-rate-kept" in names
    assert {p.name: p.read_text() for p in (work / "state" / "host").glob("load-rate*.json")} == rates
