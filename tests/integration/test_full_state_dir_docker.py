"""A full state dir never leaves the host without a server (issue 30, item 1), on real parts: the real `kimik3`,
dockerd, the demo's CPU image and tiny model. The state dir is a small tmpfs filled to several levels of free
space (0, one block, a few KiB, exactly the room the apply asks for, more, and room that another writer takes the
moment the old container is removed) during an apply that replaces the server; after each, a server answers on the
port (the new one, or the old one kept or brought back), and the next apply, with the room freed, converges and
records what runs as the last good profile.

Names and ports are this module's own (k3-fullstate, 19330): other developers share the daemon.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import tmpfs
from support.realparts import demo_hub, demo_profile, docker, kimik3, remove_leftovers, serves, write_profile

pytestmark = pytest.mark.docker

NAME, PORT = "k3-fullstate", 19330
BLOCK = 4096


@pytest.fixture
def state_on_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """`tmp_path/state` (the state dir `kimik3()` uses) on its own 1 MiB tmpfs, unmounted at the end."""
    state = tmp_path / "state"
    state.mkdir()
    remove_leftovers(NAME)
    try:
        with tmpfs(state, "k3-fullstate", required=True, lazy=True):
            yield state
    finally:
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


def free_bytes(state: Path) -> int:
    fs = os.statvfs(state)
    return fs.f_bavail * fs.f_frsize


def leave_free(state: Path, free: int) -> None:
    """Fill the state dir's file system until `free` bytes are left (a filler file of zeros)."""
    filler = state / "filler"
    filler.unlink(missing_ok=True)
    with open(filler, "wb") as out:
        out.write(b"\0" * max(free_bytes(state) - free, 0))
    assert free_bytes(state) == free, f"wanted {free} bytes free, have {free_bytes(state)}"


def fill_once_removed(state: Path, old_id: str, done: threading.Event) -> None:
    """Another writer fills the disk the moment the old container is gone (after the apply's room check), and
    takes every block kimik3 frees meanwhile, until the apply ends."""
    while not done.is_set():
        found = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", NAME], capture_output=True, text=True)
        if found.stdout.strip() != old_id:
            break
        time.sleep(0.05)
    with open(state / "filler-race", "wb", buffering=0) as out:
        while not done.is_set():
            try:
                out.write(b"\0" * BLOCK)
            except OSError:  # full: look again for a block kimik3 freed (a deleted record, a replaced one)
                time.sleep(0.01)


def message(stderr: str) -> str:
    """The first line of the error kimik3 printed (its message may span lines)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("error")), lines[-1] if lines else "")[:160]


def ubatch_running() -> str:
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    return argv[argv.index("--ubatch-size") + 1]


def test_an_apply_into_a_full_state_dir_always_leaves_a_server_answering(tmp_path: Path, state_on_tmpfs: Path) -> None:
    with demo_hub() as hub:
        profiles = {}
        for ubatch in ("4096", "2048"):
            profile = demo_profile(tmp_path, NAME, PORT, hub.url)
            profile["serve"]["ubatch"] = int(ubatch)
            write_profile(tmp_path, profile, f"ubatch-{ubatch}.yaml")
            profiles[ubatch] = f"ubatch-{ubatch}.yaml"
        kimik3(tmp_path, "apply", profiles["4096"])  # converged, verified: the last good profile
        assert serves(PORT)
        running, rows = "4096", []
        # None: exactly what the apply asked for; "race": room, then the disk fills once the old server is gone.
        levels: list[int | str | None] = [0, BLOCK, 3 * BLOCK, None, 64 * BLOCK, "race"]
        asked = None
        try:
            for level in levels:
                free = asked if level is None else 64 * BLOCK if level == "race" else level
                assert isinstance(free, int), "no refusal said how much room the apply needs"
                other = "2048" if running == "4096" else "4096"
                leave_free(state_on_tmpfs, free)
                done = threading.Event()
                filler = (
                    threading.Thread(
                        target=fill_once_removed, args=(state_on_tmpfs, docker("inspect", "-f", "{{.Id}}", NAME), done)
                    )
                    if level == "race"
                    else None
                )
                if filler is not None:
                    filler.start()
                result = kimik3(tmp_path, "apply", profiles[other], check=False)
                done.set()
                if filler is not None:
                    filler.join()
                    free = -1  # shown as filled to 0 during the apply
                first_error = message(result.stderr) if result.returncode else ""
                reverted = "reverted to the last good profile" in result.stderr
                needed = re.search(r"record\(s\) there \([^)]*: ([\d.]+) KiB\)", result.stderr)
                if needed and asked is None:
                    asked = math.ceil(float(needed.group(1)) * 1024 / BLOCK) * BLOCK
                answering = serves(PORT)
                now = ubatch_running() if answering else "-"
                said = first_error + (" [reverted]" if reverted else "")
                rows.append((free, result.returncode, running, now, said))
                assert "Traceback" not in result.stderr, result.stderr
                assert answering, f"no server answers after an apply with {free} bytes free:\n{result.stderr}"
                assert result.returncode in (0, 1, 8), result.stderr
                if result.returncode == 0:
                    assert now == other  # the new server runs, verified
                for filler_file in state_on_tmpfs.glob("filler*"):
                    filler_file.unlink()
                kimik3(tmp_path, "apply", profiles[other])  # room again: converges to the profile asked for
                assert serves(PORT) and ubatch_running() == other
                assert kimik3(tmp_path, "plan", "--detailed-exitcode", profiles[other], check=False).returncode == 0
                good = json.loads((state_on_tmpfs / "last-good" / f"{NAME}.json").read_text())["text"]
                assert f"ubatch: {other}" in good  # the revert target is what runs now
                running = other
        finally:
            print(
                "\nfree bytes (-1: 256 KiB, filled to 0 once the old container was removed) | apply exit | "
                "ubatch before | ubatch answering after | message"
            )
            for free, code, before, now, said in rows:
                print(f"{free:>10} | {code:>10} | {before:>13} | {now:>22} | {said}")
        assert asked is not None and asked > 3 * BLOCK
        # Short of the room it asks for, the apply is refused before it stops anything: the old server answers.
        short = [row for row in rows if 0 <= row[0] < asked]
        assert short and all(code == 8 and now == before for _, code, before, now, _ in short)
