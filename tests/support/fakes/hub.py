"""FakeHub: a Hugging Face hub and HF cache on a temp folder; `gguf_bytes` writes a header-only GGUF."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from pathlib import Path

from kimik3_reconciler.errors import DownloadFailed
from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.specs import ModelDownload
from kimik3_reconciler.ports import FileProgress, LineSink


class FakeHub:
    """A hub with one repo@revision; its "cache" is a plain folder (path in repo -> file) under the cache dir
    (`root` by default: `root / "cache" / path`; a profile's model.cache_dir puts it under that folder)."""

    def __init__(self, repo: str, revision: str, files: dict[str, bytes], root: Path):
        self.repo, self.revision, self.files, self.root = repo, revision, files, root
        self.listings = 0
        self.downloads: list[tuple[str, ...]] = []
        self.corrupt: set[str] = set()

    def default_cache_dir(self) -> str:
        return str(self.root)

    def repo_cache_dir(self, repo: str, cache_dir: str) -> Path:
        return Path(cache_dir) / ("models--" + repo.replace("/", "--"))

    def list_files(self, repo: str, revision: str, paths: Iterable[str], endpoint: str | None) -> list[RemoteFile]:
        self.listings += 1
        if (repo, revision) != (self.repo, self.revision):
            raise DownloadFailed(f"{repo}@{revision}: not found")
        wanted = tuple(paths)
        return [
            RemoteFile(path=p, size=len(b), sha256=hashlib.sha256(b).hexdigest())
            for p, b in sorted(self.files.items())
            if any(p == w or p.startswith(w + "/") for w in wanted)
        ]

    def list_repo(self, repo: str, revision: str, endpoint: str | None) -> list[RemoteFile]:
        return self.list_files(repo, revision, {p.split("/")[0] for p in self.files}, endpoint)

    def read_head(self, repo: str, revision: str, path: str, endpoint: str | None, nbytes: int) -> bytes:
        return self.files[path][:nbytes]

    def remove_cached(self, repo: str, revision: str, path: str, cache_dir: str) -> None:
        (Path(cache_dir) / "cache" / path).unlink(missing_ok=True)

    def cached_file(self, repo: str, revision: str, path: str, cache_dir: str) -> Path | None:
        cached = Path(cache_dir) / "cache" / path
        return cached if cached.is_file() else None

    def cached_blob(self, repo: str, file: RemoteFile, cache_dir: str) -> Path | None:
        """`root/blobs/<sha256>`: present only where a test put it (this fake's downloads write no blobs)."""
        blob = self.root / "blobs" / (file.blob_name or "-")
        return blob if blob.is_file() else None

    def download(self, spec: ModelDownload, on_progress: FileProgress, on_line: LineSink | None = None) -> int:
        """Like the real one: a file whose bytes don't hash to the listing is refused, never cached; a cached blob
        of the right content is adopted (linked), not fetched."""
        self.downloads.append(spec.missing)
        fetched = 0
        for path in spec.missing:
            if path in self.corrupt:
                raise DownloadFailed(f"{path}: sha256 mismatch with the hub's; removed, run apply again")
            target = Path(spec.cache_dir) / "cache" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            blob = self.root / "blobs" / hashlib.sha256(self.files[path]).hexdigest()
            adopted = blob.is_file() and blob.read_bytes() == self.files[path]
            target.write_bytes(self.files[path])
            fetched += 0 if adopted else len(self.files[path])
        return fetched


def gguf_bytes(metadata: dict[str, str]) -> bytes:
    """A GGUF v3 file with string metadata and no tensors: all that verify reads of a shard (model/weights.py)."""

    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value.encode())) + value.encode()

    body = b"".join(text(k) + struct.pack("<I", 8) + text(v) for k, v in metadata.items())
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata)) + body
