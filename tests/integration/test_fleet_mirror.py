"""Bytes once per site (issue 36 item 4) on real parts without the rig: the fixture hub over HTTP, a host's
verified cache served by the real `kimik3 fleet mirror start` process (aiohttp, detached, on loopback), and
kimik3's own downloader asking that mirror before the hub (adapters/hf_hub.py's peers, as `KIMIK3_PEERS` sets
them). Three caches stand for three hosts: the first fetches from the hub; the second takes every file from the
first's mirror (the hub sends it no byte); a copy tampered with on the first host is refused by the third (the
hub's sha256), which fetches that file from the hub. The files are cut into parallel ranges (the mirror answers
Range requests), as an 800 GB checkpoint's shards are. The rig test (test_fleet_rollout_docker.py) runs the same
through `fleet apply` on three namespace hosts."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from support.realparts import KIMIK3, REPO_ROOT
from support.registry import free_port

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_reconciler.adapters import hub_download
from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub
from kimik3_reconciler.model.specs import ModelDownload

REPO, REV = "kimik3-test/site-GGUF", "c7" * 20
SHARDS = {"Q/K3-Q-00001-of-00002.gguf": 6 << 20, "Q/K3-Q-00002-of-00002.gguf": 5 << 20}


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureHub]:
    """A hub of its own per test: its byte counts are that test's."""
    root = tmp_path_factory.mktemp("site-hub")
    files = {}
    for path, size in SHARDS.items():
        local = root / Path(path).name
        local.write_bytes(os.urandom(size))
        files[path] = local
    with FixtureHub([FixtureRepo(REPO, REV, files)]) as running:
        yield running


def spec_for(hub: FixtureHub, cache: Path) -> ModelDownload:
    files = tuple(HuggingFaceHub().list_files(REPO, REV, ["Q"], hub.url))
    return ModelDownload(
        repo=REPO,
        revision=REV,
        quant="Q",
        endpoint=hub.url,
        cache_dir=str(cache),
        files=files,
        missing=tuple(f.path for f in files),
        manifest_key="unused",
    )


def cached_sha256(cache: Path, path: str) -> str:
    found = HuggingFaceHub().cached_file(REPO, REV, path, str(cache))
    assert found is not None, f"{path} not in {cache}"
    return hashlib.sha256(found.read_bytes()).hexdigest()


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`kimik3 fleet mirror start` on loopback over the first host's cache (the profile says which, on stdin)."""
    cache, state, port = tmp_path / "host1-cache", tmp_path / "host1-state", free_port()
    cache.mkdir()
    profile = yaml.safe_load((REPO_ROOT / "profiles" / "demo-cpu.yaml").read_text())
    profile["model"]["cache_dir"] = str(cache)
    profile["build"]["archive"] = str(tmp_path / "unused.tar.gz")
    started = subprocess.run(
        [*KIMIK3, "--state-dir", str(state), "fleet", "mirror", "start", "--port", str(port), "/dev/stdin"],
        input=yaml.safe_dump(profile),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    try:
        yield f"http://127.0.0.1:{port}", cache
    finally:
        stopped = subprocess.run(
            [*KIMIK3, "--state-dir", str(state), "fleet", "mirror", "stop"], capture_output=True, text=True
        )
        assert "mirror: stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_the_second_host_takes_the_files_from_the_first_and_a_tampered_copy_is_refused(
    hub: FixtureHub, mirror: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, first = mirror
    monkeypatch.setattr(hub_download, "MIN_RANGE", 1 << 20)  # each shard over parallel ranges, from either source
    total = sum(SHARDS.values())
    # Nothing held yet: the mirror answers 404 (as the hub does for a path it lacks), never a partial.
    assert httpx.head(f"{url}/{REPO}/resolve/{REV}/{next(iter(SHARDS))}").status_code == 404

    assert HuggingFaceHub().download(spec_for(hub, first), lambda *_: None) == total  # host 1: from the hub
    want = {path: cached_sha256(first, path) for path in SHARDS}
    served = dict(hub.faults.served)
    assert served == SHARDS  # each byte once

    said: list[str] = []
    second = tmp_path / "host2-cache"
    assert HuggingFaceHub(peers=(url,)).download(spec_for(hub, second), lambda *_: None, said.append) == 0
    assert hub.faults.served == served  # the hub sent host 2 nothing
    assert {path: cached_sha256(second, path) for path in SHARDS} == want
    assert sorted(said) == sorted(f"{path}: from peer {url}, sha256 checked" for path in SHARDS)

    tampered = next(iter(SHARDS))
    blob = HuggingFaceHub().cached_file(REPO, REV, tampered, str(first)).resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte, the same size: only the hash tells
    blob.write_bytes(bytes(data))
    said.clear()
    third = tmp_path / "host3-cache"
    fetched = HuggingFaceHub(peers=(url,)).download(spec_for(hub, third), lambda *_: None, said.append)
    assert fetched == SHARDS[tampered]  # that file alone came from the hub again
    assert hub.faults.served == {**served, tampered: 2 * SHARDS[tampered]}
    assert {path: cached_sha256(third, path) for path in SHARDS} == want  # what host 3 holds is the hub's
    refused = [line for line in said if "refused" in line]
    assert len(refused) == 1 and refused[0].startswith(f"{tampered}: the copy from peer {url} is refused: ")
    assert "sha256" in refused[0]


def test_an_unreachable_peer_costs_hub_bytes_not_the_download(hub: FixtureHub, tmp_path: Path) -> None:
    said: list[str] = []
    dead = f"http://127.0.0.1:{free_port()}"
    fetched = HuggingFaceHub(peers=(dead,)).download(spec_for(hub, tmp_path / "c"), lambda *_: None, said.append)
    assert fetched == sum(SHARDS.values())
    assert hub.faults.served == SHARDS
    assert said == [f"peer {dead} not reachable (ConnectError): not asked again"]
