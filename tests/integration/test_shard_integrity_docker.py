"""No corrupt shard is served, against the real dockerd, the CPU image and the fixture hub: a byte
flipped in a cached blob is re-hashed (its stat fingerprint moved), refetched, and only then is the
server (re)started; bit rot that moves no stat field is caught by `--verify`, which says "sha256
mismatch", refetches and replaces the running server (docs/operations.md, "Model file integrity")."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from support.demo_work import converged_fixture
from support.realparts import docker, kimik3

from kimik3_demo.prepare import DEMO_REPO, DEMO_REVISION

pytestmark = pytest.mark.docker

NAME = "k3-drift-shard"
PORT = 19211
SHARD = "UD-Q2_K_XL/Kimi-K3-tiny-UD-Q2_K_XL-00001-of-00002.gguf"


workdir = converged_fixture("shards", NAME, PORT)


def manifest(work: Path) -> Path:
    """The quant's verified manifest for the one cache dir this module uses (`UD-Q2_K_XL@<cache dir hash>.json`)."""
    folder = work / "state" / "models" / DEMO_REPO.replace("/", "--") / DEMO_REVISION
    (found,) = folder.glob("UD-Q2_K_XL@*.json")
    return found


def blob(work: Path) -> Path:
    repo_dir = work / "hf-cache" / ("models--" + DEMO_REPO.replace("/", "--"))
    return (repo_dir / "snapshots" / DEMO_REVISION / SHARD).resolve()


def verified_sha256(work: Path) -> str:
    return next(f["sha256"] for f in json.loads(manifest(work).read_text())["files"] if f["path"] == SHARD)


def flip_one_byte(path: Path, keep_mtime: bool = False) -> None:
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(before.st_size // 2)
        byte = f.read(1)
        f.seek(before.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def steps(result: subprocess.CompletedProcess[str], key: str = "steps") -> dict[str, dict]:
    return {s["kind"]: s for s in json.loads(result.stdout)[key]}


def executed(result: subprocess.CompletedProcess[str]) -> list[tuple[str, str]]:
    return [(s["kind"], s["action"]) for s in json.loads(result.stdout)["executed"]]


def started_at(name: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(docker("inspect", "-f", "{{.State.StartedAt}}", name)[:26] + "+00:00")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["plain-edit", "mtime-restored"])
def test_flipped_byte_then_stop_then_apply_refetches_before_the_start(workdir: Path, keep_mtime: bool) -> None:
    docker("stop", NAME)
    flip_one_byte(blob(workdir), keep_mtime)  # restoring mtime does not restore ctime: still caught
    plan = steps(kimik3(workdir, "plan", "--json", "profile.yaml"))
    assert plan["model"]["action"] == "create"
    assert "1 of 2 changed since verified: re-hashed, sha256 mismatch" in plan["model"]["reason"]
    assert plan["container"]["action"] == "update"  # a start reads the refetched file
    applied = kimik3(workdir, "apply", "--json", "profile.yaml")
    assert executed(applied) == [("model", "create"), ("container", "update"), ("health", "read")]
    assert sha256(blob(workdir)) == verified_sha256(workdir)
    refetched = datetime.datetime.fromtimestamp(blob(workdir).stat().st_mtime, datetime.UTC)
    assert started_at(NAME) > refetched  # the server started only after the good bytes landed
    assert json.loads(kimik3(workdir, "plan", "--json", "profile.yaml").stdout)["converged"] is True


def test_a_blob_edited_under_the_running_server_replaces_it_after_the_refetch(workdir: Path) -> None:
    before = docker("inspect", "-f", "{{.Id}}", NAME)
    flip_one_byte(blob(workdir))
    applied = kimik3(workdir, "apply", "--json", "profile.yaml")
    assert executed(applied) == [("model", "create"), ("preread", "read"), ("container", "replace"), ("health", "read")]
    assert docker("inspect", "-f", "{{.Id}}", NAME) != before
    assert sha256(blob(workdir)) == verified_sha256(workdir)


def test_bit_rot_under_the_running_server_is_caught_by_verify(workdir: Path) -> None:
    before = docker("inspect", "-f", "{{.Id}}", NAME)
    record = json.loads(manifest(workdir).read_text())
    flip_one_byte(blob(workdir))
    # Below the filesystem no stat field moves: as if, record the blob's stat as it is now.
    stat = blob(workdir).stat()
    record["stats"][SHARD] = {
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
        "inode": stat.st_ino,
    }
    manifest(workdir).write_text(json.dumps(record))
    assert json.loads(kimik3(workdir, "plan", "--json", "profile.yaml").stdout)["converged"] is True  # the limit
    model = steps(kimik3(workdir, "plan", "--json", "--verify", "profile.yaml"))["model"]
    assert model["action"] == "create" and "sha256 mismatch" in model["reason"] and "missing" not in model["reason"]
    applied = kimik3(workdir, "apply", "--json", "--verify", "profile.yaml")
    assert executed(applied) == [("model", "create"), ("preread", "read"), ("container", "replace"), ("health", "read")]
    assert docker("inspect", "-f", "{{.Id}}", NAME) != before
    assert sha256(blob(workdir)) == verified_sha256(workdir)
    assert json.loads(kimik3(workdir, "plan", "--json", "profile.yaml").stdout)["converged"] is True
