"""Set-ups the integration tests share around the demo repo: a fixture hub with a shard that downloads but cannot
load, a fresh work folder for a named container, and a tmpfs mounted for a test."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_demo.prepare import DEMO_REPO, DEMO_REVISION, demo_repos
from support.realparts import converged_demo, demo_profile, remove_leftovers, require_docker_and_demo_hub, write_profile

GOOD_SHARD = "UD-Q2_K_XL/Kimi-K3-tiny-UD-Q2_K_XL-00001-of-00002.gguf"


@contextmanager
def truncated_hub(folder: Path, host: str = "127.0.0.1") -> Iterator[FixtureHub]:
    """The demo repo plus UD-TRUNC: one shard cut to a third (written in `folder`), which downloads and verifies but
    cannot load; on `host` (the fleet rig's hosts reach the hub on the bridge)."""
    repos = demo_repos(require_docker_and_demo_hub())
    good = repos[0].files[GOOD_SHARD]
    truncated = folder / "Kimi-K3-tiny-UD-TRUNC.gguf"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    files = {**repos[0].files, "UD-TRUNC/Kimi-K3-tiny-UD-TRUNC.gguf": truncated}
    with FixtureHub([FixtureRepo(DEMO_REPO, DEMO_REVISION, files)], host=host) as running:
        yield running


def fresh_work(factory: pytest.TempPathFactory, label: str, *names: str) -> Path:
    """A new work folder, the containers `names` of an interrupted earlier run of this test removed."""
    work = factory.mktemp(label)
    remove_leftovers(*names)
    return work


@contextmanager
def tmpfs(target: Path, label: str, *, required: bool, lazy: bool) -> Iterator[Path]:
    """A 1 MiB tmpfs on `target` (an empty folder) for the test's span. A test that cannot run without it
    (`required`) fails when the mount fails, another skips; `lazy` unmounts with -l (a server may still hold it)
    and ignores the exit, else the unmount must succeed."""
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", label, str(target)], capture_output=True, text=True)
    if made.returncode != 0:
        why = " (the test runs as root, as CI does)" if required else " here"
        (pytest.fail if required else pytest.skip)(f"cannot mount a tmpfs{why}: {made.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", *(["-l"] if lazy else []), str(target)], capture_output=True, check=not lazy)


def demo_on_hub_port(work: Path, name: str, port: int, hub_port: int) -> Iterator[Path]:
    """A module fixture's body: the demo profile for container `name` written in `work`, its hub on the fixed
    `hub_port` for the fixture's span (the profile keeps that url for every apply of the module); the container of
    an interrupted earlier run removed before, and ours after."""
    with FixtureHub(demo_repos(require_docker_and_demo_hub()), port=hub_port) as hub:
        write_profile(work, demo_profile(work, name, port, hub.url))
        remove_leftovers(name)
        yield work
    remove_leftovers(name)


def converged_fixture(label: str, name: str, port: int):  # noqa: ANN201 - a pytest fixture
    """A module fixture (assign it to the fixture's name in the test module): the demo profile as `name` on `port`,
    applied from a new folder `label`, its folder yielded; the container removed after."""

    @pytest.fixture(scope="module")
    def converged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
        yield from converged_demo(tmp_path_factory.mktemp(label), name, port)

    return converged
