"""A local source archive is hashed once per stat fingerprint (observe/local_inputs.archive_sha256): a no-op
plan reads one small memo instead of the archive; any write to the archive, `--verify`, or a memo that does
not match the file makes it read the bytes again."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from support.fakes.state import MemoryCache

from kimik3_reconciler.model.records import file_hash_key
from kimik3_reconciler.observe import local_inputs
from kimik3_reconciler.observe.local_inputs import archive_sha256


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    seen: list[Path] = []
    real = local_inputs.sha256_file

    def counting(path: Path) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(local_inputs, "sha256_file", counting)
    return seen


def test_an_unmoved_archive_is_not_read_again(tmp_path: Path, reads: list[Path]) -> None:
    archive, state = tmp_path / "src.tar.gz", MemoryCache()
    archive.write_bytes(b"one")
    assert archive_sha256(archive, state) == hashlib.sha256(b"one").hexdigest()
    assert archive_sha256(archive, state) == hashlib.sha256(b"one").hexdigest()
    assert reads == [archive]


def test_a_rewritten_archive_is_read_again_even_with_its_old_size_and_mtime(tmp_path: Path, reads: list[Path]) -> None:
    archive, state = tmp_path / "src.tar.gz", MemoryCache()
    archive.write_bytes(b"one")
    archive_sha256(archive, state)
    mtime = archive.stat().st_mtime_ns
    archive.write_bytes(b"two")  # same size
    os.utime(archive, ns=(mtime, mtime))  # mtime restored: ctime still moved
    assert archive_sha256(archive, state) == hashlib.sha256(b"two").hexdigest()
    assert len(reads) == 2


def test_verify_always_reads_and_a_foreign_or_torn_memo_is_ignored(tmp_path: Path, reads: list[Path]) -> None:
    archive, state = tmp_path / "src.tar.gz", MemoryCache()
    archive.write_bytes(b"one")
    archive_sha256(archive, state)
    assert archive_sha256(archive, state, rehash=True) == hashlib.sha256(b"one").hexdigest()
    memo = state.read(file_hash_key(str(archive)))
    assert memo is not None
    state.write(file_hash_key(str(archive)), {**memo, "sha256": None})  # torn: no sha256
    archive_sha256(archive, state)
    state.write(file_hash_key(str(archive)), {**memo, "path": "/elsewhere"})  # another file's memo
    assert archive_sha256(archive, state) == hashlib.sha256(b"one").hexdigest()
    assert len(reads) == 4
    assert json.dumps(state.read(file_hash_key(str(archive))))  # rewritten whole
