"""The Hugging Face hub and HF cache through huggingface_hub; hub errors become errors.py's."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

# Only `constants` at import time: a converged plan never asks the hub, and huggingface_hub's API and
# cache modules cost ~0.2 s to import (bench/plan.py); they, httpx and the downloader are imported where
# they are used.
from huggingface_hub import constants

from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import HubError, InputError, Kimik3Error
from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.hub_endpoint import masked, shown, token_may_go_to
from kimik3_reconciler.model.specs import ModelDownload
from kimik3_reconciler.ports import FileProgress, LineSink

if TYPE_CHECKING:
    from huggingface_hub.hf_api import RepoFile

_COMMIT = re.compile(r"[0-9a-f]{40}")
PROBE_VALID_S = 60.0  # how long a hub that answered the reachability probe is taken as up


def _is_transport(exc: Exception) -> bool:
    """huggingface_hub 2.x speaks httpx2, whose errors are not httpx's classes: match them by name."""
    return any(
        cls.__module__.split(".")[0] in ("httpx", "httpx2")
        and cls.__name__ in ("TransportError", "ConnectError", "TimeoutException", "NetworkError")
        for cls in type(exc).__mro__
    )


def _hub_error(exc: Exception, what: str, hub: str) -> Kimik3Error | None:
    """`what`: the repo, revision and path asked for, so the message names which one the hub refused. Credentials
    in the hub URL (HF_ENDPOINT=https://user:password@mirror) are masked in the message."""
    error = _hub_error_unmasked(exc, what, shown(hub))
    return type(error)(masked(str(error), hub)) if error is not None else None


def _hub_error_unmasked(exc: Exception, what: str, hub: str) -> Kimik3Error | None:
    import httpx
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, RepositoryNotFoundError):
        return HubError(f"{what}: repository not found (or private without a token) at hub {hub}")
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"{what}: revision not found in the repository at hub {hub}")
    if isinstance(exc, EntryNotFoundError):
        return HubError(f"{what}: path not found at this revision (check model.quant / model.mmproj) at hub {hub}")
    if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)) or _is_transport(exc):
        return HubError(f"{what}: hub {hub} not reachable: {exc}")
    if isinstance(exc, HfHubHTTPError):
        return HubError(f"{what}: {exc} (hub {hub})")
    return None


def hub_token(hub: str) -> str | bool | None:
    """The token for requests to `hub`: huggingface_hub's own (HF_TOKEN or the token file), or False
    (huggingface_hub's "send none") when the hub is plain http to another host."""
    # rule: hub-token-https
    # A bearer token over plain http to a non-loopback host travels in clear text: never send it there.
    if not token_may_go_to(hub):
        return False
    from huggingface_hub import get_token

    token = get_token()
    if token is not None and not re.fullmatch(r"[\x21-\x7e]+", token):
        # A BOM or a pasted invisible/non-ASCII character made httpx raise UnicodeEncodeError on the first request
        # (a traceback). A header carries printable ASCII only; the token itself is never shown.
        raise InputError(
            "the Hugging Face token (HF_TOKEN / HUGGING_FACE_HUB_TOKEN, else the token file of `hf auth "
            "login`) holds a space, a control or a non-ASCII character (a BOM or a pasted invisible "
            "character?): an HTTP header carries printable ASCII only; set it again as printed by the hub"
        )
    return token


def _remote(entry: RepoFile) -> RemoteFile:
    return RemoteFile(
        path=entry.path, size=entry.size, sha256=entry.lfs.sha256 if entry.lfs else None, git_oid=entry.blob_id
    )


class HuggingFaceHub:
    def __init__(self, download_workers: int = 4, peers: tuple[str, ...] = ()):
        self.download_workers = download_workers  # files fetched at a time
        self.peers = peers  # site hosts' mirrors asked before the hub (fleet apply's KIMIK3_PEERS)
        self._answered: dict[str, float] = {}  # hub URL -> when it last answered the reachability probe

    def _reachable(self, endpoint: str | None, what: str) -> None:
        """One HEAD of the hub's root, retried once after 0.5 s: a refused connection or an unknown host name
        fails in about a second with the URL named, instead of huggingface_hub's 5 retries (~25 s of
        warnings) per request. Any HTTP answer counts as reachable, for a minute (a long-lived process,
        e.g. a reconcile loop, probes again later)."""
        hub = endpoint or constants.ENDPOINT
        if time.monotonic() - self._answered.get(hub, -PROBE_VALID_S) < PROBE_VALID_S or constants.HF_HUB_OFFLINE:
            return  # answered recently; or offline, where huggingface_hub itself refuses without a request
        import httpx
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(httpx.TransportError),
                stop=stop_after_attempt(2),
                wait=wait_fixed(0.5),
                reraise=True,
            ):
                with attempt:
                    httpx.head(hub, timeout=httpx.Timeout(10.0, connect=5.0))
        except httpx.TransportError as exc:
            raise HubError(masked(f"{what}: hub {shown(hub)} not reachable: {exc} (tried twice)", hub)) from exc
        self._answered[hub] = time.monotonic()

    def default_cache_dir(self) -> str:
        return str(constants.HF_HUB_CACHE)

    def repo_cache_dir(self, repo: str, cache_dir: str) -> Path:
        return Path(cache_dir) / ("models--" + repo.replace("/", "--"))

    # No retry of ours past the probe: huggingface_hub already retries a failing request 5 times (~25 s).
    def list_files(self, repo: str, revision: str, paths: Iterable[str], endpoint: str | None) -> list[RemoteFile]:
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        hub = endpoint or constants.ENDPOINT
        api = HfApi(endpoint=endpoint, token=hub_token(hub))
        files: list[RemoteFile] = []
        for path in paths:
            what = f"{repo}@{revision[:12]}:{path}"
            self._reachable(endpoint, what)
            with translated(lambda exc: _hub_error(exc, what, hub)):
                entries = list(api.list_repo_tree(repo, path_in_repo=path, recursive=True, revision=revision))
                if not entries:
                    entries = list(api.get_paths_info(repo, [path], revision=revision))
            found = [e for e in entries if isinstance(e, RepoFile)]
            if not found:
                raise HubError(f"{what}: nothing at this path at hub {shown(hub)} (check model.quant / model.mmproj)")
            files += [_remote(e) for e in found]
        return sorted(files, key=lambda f: f.path)

    def list_repo(self, repo: str, revision: str, endpoint: str | None) -> list[RemoteFile]:
        self._reachable(endpoint, f"{repo}@{revision[:12]}")
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        hub = endpoint or constants.ENDPOINT
        with translated(lambda exc: _hub_error(exc, f"{repo}@{revision[:12]}", hub)):
            api = HfApi(endpoint=endpoint, token=hub_token(hub))
            entries = list(api.list_repo_tree(repo, recursive=True, revision=revision))
        return sorted((_remote(e) for e in entries if isinstance(e, RepoFile)), key=lambda f: f.path)

    def commit_of(self, repo: str, revision: str, endpoint: str | None) -> str:
        """The commit the hub serves for `revision` (a branch or tag) of `repo` now: its model info's `sha`."""
        from huggingface_hub import HfApi

        hub = endpoint or constants.ENDPOINT
        what = f"{repo}@{revision}"
        self._reachable(endpoint, what)
        with translated(lambda exc: _hub_error(exc, what, hub)):
            sha = HfApi(endpoint=endpoint, token=hub_token(hub)).model_info(repo, revision=revision).sha
        if not sha or not _COMMIT.fullmatch(sha):  # a mirror that answers without one: never write a non-commit
            raise HubError(f"{what}: hub {shown(hub)} named no commit for it (got {sha!r})")
        return sha

    def read_head(self, repo: str, revision: str, path: str, endpoint: str | None, nbytes: int) -> bytes:
        """The first `nbytes` of a file on the hub (a Range request: headers before any download)."""
        url = f"{(endpoint or constants.ENDPOINT).rstrip('/')}/{repo}/resolve/{revision}/{quote(path)}"
        import httpx

        token = hub_token(url)
        headers = {"Range": f"bytes=0-{nbytes - 1}", **({"Authorization": f"Bearer {token}"} if token else {})}
        with translated(lambda exc: _hub_error(exc, f"{repo}:{path}", endpoint or constants.ENDPOINT)):
            response = httpx.get(url, headers=headers, follow_redirects=True, timeout=60.0)
        if response.status_code not in (200, 206):
            raise HubError(f"{repo}:{path}: HTTP {response.status_code} reading its header from {shown(url)}")
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
        if _COMMIT.fullmatch(revision):
            # A pinned commit's snapshot path is fixed by the cache layout (snapshots/<commit>/<path>, a link
            # to its blob): a converged plan stats it without importing huggingface_hub's cache module.
            snapshot = self.repo_cache_dir(repo, cache_dir) / "snapshots" / revision / path
            return snapshot if snapshot.is_file() else None
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo, path, cache_dir=cache_dir, revision=revision)
        return Path(found) if isinstance(found, str) else None

    def cached_blob(self, repo: str, file: RemoteFile, cache_dir: str) -> Path | None:
        # Where the download puts (and adopts) it: adapters/hub_download.targets.
        name = file.blob_name
        blob = self.repo_cache_dir(repo, cache_dir) / "blobs" / name if name and "/" not in name else None
        return blob if blob is not None and blob.is_file() else None

    def download(self, spec: ModelDownload, on_progress: FileProgress, on_line: LineSink | None = None) -> int:
        """Fetch the missing files (resumable, sha256-verified, parallel): adapters/hub_download.py; from the
        peers first when there are any (each file checked against the hub's sha256 alike)."""
        from kimik3_reconciler.adapters.hub_download import fetch_all, fetch_from_peers, targets

        missing = set(spec.missing)
        files = tuple(f for f in spec.files if f.path in missing)
        endpoint = spec.endpoint or constants.ENDPOINT
        jobs = targets(spec.repo, spec.revision, files, endpoint, self.repo_cache_dir(spec.repo, spec.cache_dir))
        if self.peers:
            jobs, _ = fetch_from_peers(
                jobs, self.peers, spec.repo, spec.revision, on_progress, on_line or (lambda _text: None)
            )
            if not jobs:
                return 0
        token = hub_token(endpoint)
        return fetch_all(jobs, token if isinstance(token, str) else None, on_progress, self.download_workers)
