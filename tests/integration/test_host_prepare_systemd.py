"""Issue 27 item 5 against the real parts: `host: {prepare: true}` persists kernel.numa_balancing = 0 in
/etc/sysctl.d/90-kimik3.conf and loads it with the real systemd-sysctl, in the systemd container the systemd tests
use (TESTING.md section 6), through the real `kimik3` CLI (`--systemd-root` the box's rootfs, `--systemctl-prefix
"docker exec <box>"`); the demo profile's server is applied on this machine's dockerd as usual.

This machine's kernel is never touched: in the box, /proc/sys is read-only (Docker mounts it so) and its
kernel/numa_balancing is bind-mounted over by a file on the box's tmpfs, holding 1 as a stock kernel does, in the
box's own mount namespace; systemd-sysctl writes that file. The test checks this machine's value did not move.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import systemd_box
from support.realparts import demo_hub, demo_profile, kimik3, write_profile
from support.systemd_box import remove, start_box

pytestmark = pytest.mark.docker

BOX = "kimik3-hostprep-27b-box"
NAME, PORT = "kimi-k3-hostprep-27b", 18727  # not used by the other integration tests
FAKE = "/run/kimik3-test-numa_balancing"  # on the box's tmpfs
KNOB = "/proc/sys/kernel/numa_balancing"
CONF = "/etc/sysctl.d/90-kimik3.conf"
LATER = "/etc/sysctl.d/99-zz-kimik3-test.conf"  # a file a boot reads after CONF (the last test writes it)


def in_box(*args: str) -> str:
    return systemd_box.in_box(BOX, *args)


def this_machine() -> str | None:
    try:
        return Path(KNOB).read_text().strip()
    except OSError:
        return None


@pytest.fixture(scope="module")
def box() -> Iterator[Path]:
    """A systemd-as-PID-1 container whose numa_balancing is a file of its own; yields its rootfs as seen here."""
    try:
        root = start_box(BOX, rm=(NAME,), network="none")
        in_box("sh", "-c", f"echo 1 > {FAKE} && mount --bind {FAKE} {KNOB}")
        assert in_box("cat", KNOB) == "1"
        yield root
    finally:
        remove(NAME, BOX)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, box: Path) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("kimik3-hostprep")
    with demo_hub() as hub:
        profile = demo_profile(work, NAME, PORT, hub.url)
        profile["host"] = {"prepare": True}
        write_profile(work, profile, "profile.yaml")
        yield work


@pytest.fixture
def prepared(work: Path, box: Path) -> Path:
    """The profile applied (a no-op when it already is): CONF written and loaded, whatever ran before (the tests run
    in a random order), or alone."""
    run(work, box, "apply")
    return work


def run(work: Path, box: Path, *args: str) -> dict:
    result = kimik3(
        work, "--systemd-root", str(box), "--systemctl-prefix", f"docker exec {BOX}", *args, "--json", "profile.yaml"
    )
    return json.loads(result.stdout)


def test_the_plan_shows_the_setting_and_apply_persists_and_loads_it(work: Path, box: Path) -> None:
    in_box("sh", "-c", f"rm -f {CONF} {LATER} && echo 1 > {FAKE}")  # a stock box, whatever ran before
    before = this_machine()
    plan = run(work, box, "plan")
    host = plan["steps"][0]
    assert (host["kind"], host["action"], host["target"]) == ("host", "create", CONF)
    assert host["diff"] == [{"field": "kernel.numa_balancing", "old": "1", "new": "0"}]
    started = time.monotonic()
    applied = run(work, box, "apply")
    print(f"apply: {time.monotonic() - started:.1f} s")
    assert [(s["kind"], s["action"]) for s in applied["executed"]][0] == ("host", "create")
    # Persisted where systemd-sysctl reads at boot, in the box, and loaded by the real systemd-sysctl there.
    text = (box / CONF.lstrip("/")).read_text()
    assert text.startswith("# kimik3: host.prepare") and "kernel.numa_balancing = 0" in text.splitlines()
    assert in_box("cat", CONF) == text.strip()
    assert in_box("cat", KNOB) == "0" and in_box("cat", FAKE) == "0"
    assert this_machine() == before  # this machine's kernel setting did not move


def test_a_second_apply_is_a_noop(prepared: Path, box: Path) -> None:
    work = prepared
    mtime = (box / CONF.lstrip("/")).stat().st_mtime_ns
    plan = run(work, box, "plan")
    assert plan["converged"] and plan["steps"][0]["action"] == "noop" and CONF in plan["steps"][0]["reason"]
    applied = run(work, box, "apply")
    assert applied["executed"] == []
    assert (box / CONF.lstrip("/")).stat().st_mtime_ns == mtime


def test_a_value_set_back_is_loaded_again_without_rewriting_the_file(prepared: Path, box: Path) -> None:
    work = prepared
    before = this_machine()
    in_box("sh", "-c", f"echo 1 > {FAKE}")
    mtime = (box / CONF.lstrip("/")).stat().st_mtime_ns
    host = run(work, box, "plan")["steps"][0]
    assert (host["action"], host["diff"]) == ("update", [{"field": "kernel.numa_balancing", "old": "1", "new": "0"}])
    assert "load it again" in host["reason"]
    applied = run(work, box, "apply")
    assert [(s["kind"], s["action"]) for s in applied["executed"]] == [("host", "update")]
    assert in_box("cat", KNOB) == "0" and (box / CONF.lstrip("/")).stat().st_mtime_ns == mtime
    assert this_machine() == before


def test_a_later_file_that_turns_it_back_at_boot_is_warned(prepared: Path, box: Path) -> None:
    work = prepared
    later = LATER
    in_box("sh", "-c", f"echo 'kernel.numa_balancing = 1' > {later}")
    try:
        # What a boot does with both files, by the real loader: name order, the last value wins.
        in_box("/usr/lib/systemd/systemd-sysctl", CONF, later)
        assert in_box("cat", KNOB) == "1"
        host = run(work, box, "plan")["steps"][0]
    finally:  # gone for the tests after this one (the order is random); the next apply loads 0 again
        in_box("rm", "-f", later)
    assert (host["action"], host["diff"]) == ("update", [{"field": "kernel.numa_balancing", "old": "1", "new": "0"}])
    assert host["warnings"] == [
        f"{later} sets kernel.numa_balancing = 1 and a boot reads it after {CONF}: every boot "
        "turns it back (seed 000 needs 0); remove that line"
    ]
