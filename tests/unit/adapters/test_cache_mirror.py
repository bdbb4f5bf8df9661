"""What a host's model mirror serves (adapters/cache_mirror.verified_file): a snapshot link to a blob of its
repository, never a partial, a plain file, or anything a path from the network names outside the snapshot."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.adapters.cache_mirror import verified_file

REPO, REV = "org/K3", "ab" * 20


def _cache(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "models--org--K3"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / REV / "Q").mkdir(parents=True)
    return tmp_path, repo


def _link(repo: Path, path: str, blob: str) -> None:
    (repo / "snapshots" / REV / path).symlink_to(Path("../../../blobs") / blob)


def test_a_snapshot_link_to_a_blob_is_served(tmp_path: Path) -> None:
    cache, repo = _cache(tmp_path)
    (repo / "blobs" / "aa").write_bytes(b"x")
    _link(repo, "Q/a.gguf", "aa")
    assert verified_file(cache, REPO, REV, "Q/a.gguf") == (repo / "blobs" / "aa").resolve()


def test_a_partial_a_plain_file_a_dangling_link_and_an_escape_are_not(tmp_path: Path) -> None:
    cache, repo = _cache(tmp_path)
    (repo / "blobs" / "bb.incomplete").write_bytes(b"half")
    _link(repo, "Q/partial.gguf", "bb.incomplete")  # a download in flight, or one that failed its hash
    (repo / "snapshots" / REV / "Q" / "plain.gguf").write_bytes(b"copied in by hand: never verified")
    _link(repo, "Q/gone.gguf", "cc")
    (tmp_path / "secret").write_text("outside")
    (repo / "snapshots" / REV / "Q" / "out.gguf").symlink_to(tmp_path / "secret")
    for path in ("Q/partial.gguf", "Q/plain.gguf", "Q/gone.gguf", "Q/out.gguf", "../../../secret", "Q//a", "Q/./a"):
        assert verified_file(cache, REPO, REV, path) is None, path
    assert verified_file(cache, REPO, "..", "secret") is None
