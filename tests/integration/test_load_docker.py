"""Issue 15 against real parts: a knob change on the demo pre-reads the model into the page cache while the old
server still serves, then swaps; the load's progress comes from the real llama-server's /proc/<pid>/io.

Residency is checked with util-linux `fincore` (not kimik3's own mincore); only the test's own files are
evicted (posix_fadvise DONTNEED), never the shared machine's whole page cache (drop_caches); the server's own
block-layer count (`read_bytes`) says whether its load came from the page cache.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from support.demo_work import converged_fixture
from support.page_cache_reads import evict
from support.realparts import docker, kimik3, write_profile

pytestmark = pytest.mark.docker

NAME = "k3lt-load"
PORT = 19500


work = converged_fixture("k3lt", NAME, PORT)


def blobs(work: Path) -> list[Path]:
    return sorted(p for p in (work / "hf-cache").glob("models--*/blobs/*") if p.is_file())


def resident(paths: list[Path]) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(v) for v in out.split())


def events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def planned_edit(work: Path, name: str, **serve: object) -> tuple[list[Path], int, dict[str, dict]]:
    """The served profile with `serve` changed, written as `name`: the model's blobs, their bytes, and the plan's
    steps by kind."""
    profile = yaml.safe_load((work / "profile.yaml").read_text())
    profile["serve"].update(serve)
    write_profile(work, profile, name)
    files = blobs(work)
    plan = json.loads(kimik3(work, "plan", "--json", name).stdout)
    return files, sum(p.stat().st_size for p in files), {s["kind"]: s for s in plan["steps"]}


def test_knob_change_prereads_then_swaps_and_the_load_is_watched(work: Path) -> None:
    files, total, steps = planned_edit(work, "knob.yaml", parallel=3)
    assert steps["preread"]["action"] == "read" and "still serves (MemAvailable" in steps["preread"]["reason"]
    cost = steps["health"]["cost"]  # the predicted downtime is the warm one (the first load here was warm too:
    assert "pre-read:" in cost or "from the page cache at" in cost, cost  # the download had just written the files)

    evict(files)
    assert resident(files) < total // 2
    before = docker("inspect", "-f", "{{.Id}}", NAME)
    applied = kimik3(work, "apply", "--json", "knob.yaml")
    log = events(applied.stderr)
    names = [e["event"] for e in log]
    # The pre-read ran, and left the model resident, before the old container was removed.
    preread = next(e for e in log if e["event"] == "pre-read")
    assert preread["resident"] == "100.0 %" and names.index("pre-read") < names.index("removed")
    assert docker("inspect", "-f", "{{.Id}}", NAME) != before
    assert resident(files) >= total - 4096 * len(files)
    # The load as the real server read it: progress against the model's bytes, and its block-layer count
    # says the page cache served it (the pre-read, since the cache was emptied above).
    loads = [e for e in log if e["event"] == "progress" and e["task"] == f"loading {NAME}"]
    assert loads and all(e["total"] == total for e in loads) and loads[-1]["read_bytes"] >= total
    healthy = next(e for e in log if e["event"] == "healthy")
    assert healthy["read_bytes"] >= total and healthy["cache"] == "warm", healthy
    assert json.loads((work / "state" / "host" / "load-rate-warm.json").read_text())["bytes"] == total


def test_dio_load_mode_reaches_the_server_skips_the_preread_and_reads_the_disk(work: Path) -> None:
    """serve.load_mode: dio on the real llama-server: the plan says why it does not pre-read, and the server's
    block-layer count shows the load read storage (direct I/O) though every byte was in the page cache."""
    files, total, steps = planned_edit(work, "dio.yaml", load_mode="dio")
    assert steps["preread"]["action"] == "noop" and "dio reads around the page cache" in steps["preread"]["reason"]
    applied = kimik3(work, "apply", "--json", "dio.yaml")
    log = events(applied.stderr)
    assert "pre-read" not in [e["event"] for e in log]
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    assert argv[argv.index("--load-mode") + 1] == "dio"
    healthy = next(e for e in log if e["event"] == "healthy")
    assert healthy["cache"] == "cold" and healthy["from_storage_bytes"] >= total // 2, healthy
