"""The Hugging Face hub and HF cache through huggingface_hub; hub errors become errors.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from urllib.parse import quote

import httpx
from huggingface_hub import HfApi, constants, get_token, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile

from kimik3_reconciler.adapters.hub_download import fetch_all, targets
from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import DownloadFailed, Kimik3Error, TransientError
from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.specs import ModelDownload



def _is_transport(exc: Exception) -> bool:
    """huggingface_hub 2.x speaks httpx2, whose errors are not httpx's classes: match them by name."""
    return any(cls.__module__.split(".")[0] in ("httpx", "httpx2")
               and cls.__name__ in ("TransportError", "ConnectError", "TimeoutException", "NetworkError")
               for cls in type(exc).__mro__)


def _hub_error(exc: Exception, what: str) -> Kimik3Error | None:
    """`what`: the repo, revision and path asked for, so the message names which one the hub refused."""
    if isinstance(exc, RepositoryNotFoundError):
        return DownloadFailed(f"{what}: repository not found (or private without a token)")
    if isinstance(exc, RevisionNotFoundError):
        return DownloadFailed(f"{what}: revision not found in the repository")
    if isinstance(exc, EntryNotFoundError):
        return DownloadFailed(f"{what}: path not found at this revision (check model.quant / model.mmproj)")
    if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)) or _is_transport(exc):
        return TransientError(f"{what}: hub not reachable: {exc}")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        return (TransientError if status >= 500 or status == 429 else DownloadFailed)(f"{what}: {exc}")
    return None


def _remote(entry: RepoFile) -> RemoteFile:
    return RemoteFile(path=entry.path, size=entry.size, sha256=entry.lfs.sha256 if entry.lfs else None,
                      git_oid=entry.blob_id)


class HuggingFaceHub:
    def __init__(self, download_workers: int = 4):
        self.download_workers = download_workers  # files fetched at a time

    def default_cache_dir(self) -> str:
        return str(constants.HF_HUB_CACHE)

    def repo_cache_dir(self, repo: str, cache_dir: str) -> Path:
        return Path(cache_dir) / ("models--" + repo.replace("/", "--"))

    # No retry of ours: huggingface_hub already retries a failing request 5 times (~25 s).
    def list_files(self, repo: str, revision: str, paths: Iterable[str], endpoint: str | None) -> list[RemoteFile]:
        api = HfApi(endpoint=endpoint)
        files: list[RemoteFile] = []
        for path in paths:
            what = f"{repo}@{revision[:12]}:{path}"
            with translated(lambda exc: _hub_error(exc, what)):
                entries = list(api.list_repo_tree(repo, path_in_repo=path, recursive=True, revision=revision))
                if not entries:
                    entries = list(api.get_paths_info(repo, [path], revision=revision))
            found = [e for e in entries if isinstance(e, RepoFile)]
            if not found:
                raise DownloadFailed(f"{what}: nothing at this path (check model.quant / model.mmproj)")
            files += [_remote(e) for e in found]
        return sorted(files, key=lambda f: f.path)

    def list_repo(self, repo: str, revision: str, endpoint: str | None) -> list[RemoteFile]:
        with translated(lambda exc: _hub_error(exc, f"{repo}@{revision[:12]}")):
            entries = list(HfApi(endpoint=endpoint).list_repo_tree(repo, recursive=True, revision=revision))
        return sorted((_remote(e) for e in entries if isinstance(e, RepoFile)), key=lambda f: f.path)

    def read_head(self, repo: str, revision: str, path: str, endpoint: str | None, nbytes: int) -> bytes:
        """The first `nbytes` of a file on the hub (a Range request: headers before any download)."""
        url = f"{(endpoint or constants.ENDPOINT).rstrip('/')}/{repo}/resolve/{revision}/{quote(path)}"
        token = get_token()
        headers = {"Range": f"bytes=0-{nbytes - 1}", **({"Authorization": f"Bearer {token}"} if token else {})}
        with translated(lambda exc: _hub_error(exc, f"{repo}:{path}")):
            response = httpx.get(url, headers=headers, follow_redirects=True, timeout=60.0)
        if response.status_code not in (200, 206):
            raise DownloadFailed(f"{repo}:{path}: HTTP {response.status_code} reading its header")
        return response.content[:nbytes]

    def remove_cached(self, repo: str, revision: str, path: str, cache_dir: str) -> None:
        """Drop the snapshot link; the blob too, unless another revision's snapshot still links to it."""
        cached = self.cached_file(repo, revision, path, cache_dir)
        if cached is None:
            return
        blob = cached.resolve()
        cached.unlink(missing_ok=True)
        snapshots = self.repo_cache_dir(repo, cache_dir) / "snapshots"
        if not any(link.resolve() == blob for link in snapshots.rglob("*") if link.is_symlink()):
            blob.unlink(missing_ok=True)

    def cached_file(self, repo: str, revision: str, path: str, cache_dir: str) -> Path | None:
        found = try_to_load_from_cache(repo, path, cache_dir=cache_dir, revision=revision)
        return Path(found) if isinstance(found, str) else None

    def download(self, spec: ModelDownload, on_progress: Callable[[str, int, int], None]) -> int:
        """Fetch the missing files (resumable, sha256-verified, parallel): adapters/hub_download.py."""
        missing = set(spec.missing)
        files = tuple(f for f in spec.files if f.path in missing)
        endpoint = spec.endpoint or constants.ENDPOINT
        jobs = targets(spec.repo, spec.revision, files, endpoint, self.repo_cache_dir(spec.repo, spec.cache_dir))
        return fetch_all(jobs, get_token(), on_progress, self.download_workers)
