"""Resumable, verified, parallel download of hub files into the standard HF cache layout.

huggingface_hub >= 1.18 deletes a partial file when a download fails, so a 50 GB shard cut at
49 GB starts over (shared/reference/hf-hub.md). kimik3 fetches itself, in HF's own layout
(`blobs/<sha256>`, `snapshots/<rev>/<path>` -> `../../blobs/<sha256>`), so huggingface_hub tools
and `try_to_load_from_cache` see the result:

- a partial lives at `blobs/<sha256>.incomplete` and is resumed with `Range: bytes=<size>-`
  by the next process (after `kill -9` too): nothing already on disk is fetched again;
- every byte is hashed as it lands (a resumed partial is re-read once); a blob is renamed into
  place only when its sha256 equals the hub's LFS oid, so no corrupt shard is ever served;
- files download in parallel (bounded), and a large file over parallel HTTP ranges into the same partial
  (adapters/hub_ranges.py: 8 connections shared by the files in flight, resumable per range); timeouts, dropped connections and 5xx are retried with
  backoff, each retry resuming where the last stopped; a refused connection or an unknown host
  name is tried once more only (the hub is down: fail fast). Giving up is a HubError naming the
  hub and the partial kept for the next apply (path, bytes: all that arrived), or saying none is (nothing
  arrived), and what the download's other files came to;
- the HF token goes only over https or to a loopback mirror (model/hub_endpoint.py).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from kimik3_reconciler.adapters.hub_ranges import RangesIgnored, fetch_ranges, recorded_bytes
from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import DownloadFailed, HubError, Kimik3Error, LocalFileError, TransientError
from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.hub_endpoint import shown, token_may_go_to

CHUNK = 8 << 20
Progress = Callable[[str, int, int], None]
CONNECTIONS = 8  # per download: one file gets them all as ranges, four files two each (bench/download.py)
MIN_RANGE = 64 << 20  # a file is cut into ranges of at least this much
HASH_AT_END = False  # ranged files: hash in file order as the ranges fill (False) or re-read once at the end


@dataclass(frozen=True)
class Target:
    """Where one file goes in the cache, and what it must hash to."""

    file: RemoteFile
    url: str
    blob: Path
    snapshot: Path

    @property
    def partial(self) -> Path:
        return self.blob.with_name(self.blob.name + ".incomplete")


def targets(repo: str, revision: str, files: tuple[RemoteFile, ...], endpoint: str, repo_dir: Path) -> list[Target]:
    out = []
    for f in files:
        # The listing comes from a hub or mirror the profile names: never let it write outside the cache.
        if f.path.startswith("/") or ".." in f.path.split("/"):
            raise DownloadFailed(f"{f.path!r}: refusing a hub path outside the repository")
        blob_name = f.blob_name
        if not blob_name:
            raise DownloadFailed(f"{f.path}: the hub lists no sha256 or git oid for it, so it cannot be verified")
        out.append(
            Target(
                f,
                f"{endpoint.rstrip('/')}/{repo}/resolve/{revision}/{quote(f.path)}",
                repo_dir / "blobs" / blob_name,
                repo_dir / "snapshots" / revision / f.path,
            )
        )
    return out


def _new_digest(file: RemoteFile) -> hashlib._Hash:
    """sha256 for LFS files; for plain git files the git blob sha1 (`blob <size>\\0` + content)."""
    if file.sha256:
        return hashlib.sha256()
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(f"blob {file.size}\0".encode())
    return digest


def _digest_of(path: Path, file: RemoteFile) -> hashlib._Hash:
    digest = _new_digest(file)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest


def _link(target: Target) -> None:
    """snapshots/<rev>/<path> -> ../../blobs/<sha256>, atomically (HF's relative symlinks)."""
    target.snapshot.parent.mkdir(parents=True, exist_ok=True)
    relative = os.path.relpath(target.blob, target.snapshot.parent)
    tmp = target.snapshot.with_name(target.snapshot.name + ".kimik3-link")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(relative)
    os.replace(tmp, target.snapshot)


def _hub(target: Target) -> str:
    parts = urlsplit(target.url)
    return shown(f"{parts.scheme}://{parts.netloc}")  # a user:password@ in HF_ENDPOINT is never printed


def _raise_for(response: httpx.Response, target: Target) -> None:
    status = response.status_code
    if status in (401, 403):
        if not token_may_go_to(target.url):
            raise HubError(
                f"{target.file.path}: HTTP {status} from the hub {_hub(target)}: no token was sent "
                "(plain http to a non-loopback host; the token goes only over https or to loopback)"
            )
        raise HubError(
            f"{target.file.path}: HTTP {status} from the hub {_hub(target)}: set HF_TOKEN or log in "
            "(huggingface_hub's token file); the token is sent only to the hub"
        )
    if status == 404:
        code = response.headers.get("X-Error-Code", "EntryNotFound")
        raise HubError(f"{target.file.path}: {code} (HTTP 404) at this revision (hub {_hub(target)})")
    if status == 429 or status >= 500:
        raise TransientError(f"{target.file.path}: HTTP {status}")
    if status not in (200, 206):
        raise DownloadFailed(f"{target.file.path}: unexpected HTTP {status}")


def _download_error(exc: Exception, target: Target) -> Kimik3Error | None:
    if isinstance(exc, httpx.TransportError):  # dropped connection, timeout: resume on retry
        return TransientError(f"{target.file.path}: {type(exc).__name__}: {exc}")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        # A local disk, not the hub or the file: exit 8 as every full disk (errors.py's table, README), not 1.
        # What is kept for the next apply is said by `fetch`, once every range has stopped writing.
        return LocalFileError(
            f"{target.file.path}: disk full in {target.blob.parent} [errno {errno.errorcode[exc.errno]}]"
        )
    return None


def _held(target: Target) -> int:
    """Bytes of `target` on disk that the next apply will not fetch again (0: nothing to resume)."""
    if not target.partial.exists():
        return 0
    recorded = recorded_bytes(target.partial, target.file.size)
    return recorded if recorded is not None else target.partial.stat().st_size


def _what_is_kept(target: Target) -> str:
    """What a failed fetch leaves for the next apply, as found on disk once it stopped: a message said "the partial
    is kept" when the hub was down before the first byte and there was none (or an empty one, sized up front for
    ranges). Called only after every range of the file has ended (`fetch`)."""
    held = _held(target)
    if held:
        return (
            f"the partial is kept for the next apply to resume: {target.partial} ({held} of {target.file.size} bytes)"
        )
    # Nothing fetched: an empty (or sized but unwritten) partial would only look like progress. The blob's lock is
    # held (_fetch_locked) and this fetch's ranges have ended, so nothing else writes it.
    target.partial.unlink(missing_ok=True)
    _ranges_record(target).unlink(missing_ok=True)
    return "nothing of it was downloaded, so no partial is kept"


def _append(client: httpx.Client, target: Target, digest: hashlib._Hash, progress: Progress) -> None:
    """Fetch from the partial's current size to the end, appending and hashing as bytes land."""
    start = target.partial.stat().st_size if target.partial.exists() else 0
    if start >= target.file.size:
        return
    headers = {"Range": f"bytes={start}-"} if start else {}
    with translated(lambda exc: _download_error(exc, target)):
        with client.stream("GET", target.url, headers=headers) as response:
            _raise_for(response, target)
            if start and response.status_code == 200:
                raise DownloadFailed(f"{target.file.path}: the server ignored the Range request")
            with open(target.partial, "ab") as out:
                done = shown = start
                # As received, not re-chunked: an 8 MiB block still being gathered when the connection dropped was
                # never written, and "nothing of it was downloaded" was said after hundreds of KB had arrived.
                for block in response.iter_bytes():
                    out.write(block)
                    digest.update(block)  # after the write: the digest holds what the partial holds
                    done += len(block)
                    if done - shown >= CHUNK or done >= target.file.size:
                        progress(target.file.path, done, target.file.size)
                        shown = done
                out.flush()
                os.fsync(out.fileno())


def _ranges_record(target: Target) -> Path:
    return target.partial.with_name(target.partial.name + ".ranges")


def _verified(target: Target, got: str, want: str | None, fetched: int) -> int:
    if target.partial.stat().st_size != target.file.size or got != want:
        target.partial.unlink()
        _ranges_record(target).unlink(missing_ok=True)
        kind = "sha256" if target.file.sha256 else "git blob sha1"
        raise DownloadFailed(f"{target.file.path}: {kind} {got} != hub's {want}; removed, run apply again")
    os.replace(target.partial, target.blob)
    _link(target)
    return fetched


def _fetch_ranged(client: httpx.Client, target: Target, progress: Progress, parts: int) -> int:
    """The file over `parts` parallel ranges (adapters/hub_ranges.py), each retried like a plain fetch."""
    digest = _new_digest(target.file)

    def one_range(fetch_one: Callable[[], None]) -> None:
        for attempt in Retrying(
            retry=retry_if_exception_type(TransientError),
            stop=_give_up,
            wait=wait_exponential(multiplier=0.5, max=30),
            reraise=True,
        ):
            with attempt, translated(lambda exc: _download_error(exc, target)):
                fetch_one()

    fetched = fetch_ranges(
        client,
        target.url,
        target.partial,
        target.file.size,
        parts,
        digest,
        lambda response: _raise_for(response, target),
        lambda done: progress(target.file.path, done, target.file.size),
        one_range,
        HASH_AT_END,
    )
    return _verified(target, digest.hexdigest(), target.file.sha256 or target.file.git_oid, fetched)


def fetch(client: httpx.Client, target: Target, progress: Progress, parts: int = 1) -> int:
    """Make `target` present and verified: adopt a good blob, resume a partial, or fetch it (over `parts`
    ranges when it is large enough). Returns the bytes that came from the hub (0 for an adopted blob; the
    rest of the file for a resumed partial). Giving up says what is kept for the next apply, as found then."""
    try:
        return _fetch(client, target, progress, parts)
    except TransientError as exc:  # retries spent (the file's, or one range's once the others ended)
        raise HubError(
            f"{target.file.path}: download from the hub {_hub(target)} failed: {exc}; {_what_is_kept(target)}"
        ) from exc
    except LocalFileError as exc:  # a full disk (exit 8)
        raise LocalFileError(f"{exc}; {_what_is_kept(target)}: free space and run apply again") from (
            exc.__cause__ or exc
        )


def _fetch(client: httpx.Client, target: Target, progress: Progress, parts: int) -> int:
    want = target.file.sha256 or target.file.git_oid
    if target.blob.exists():
        if _digest_of(target.blob, target.file).hexdigest() == want:
            _link(target)  # already complete (e.g. fetched by `hf download`): verified, adopted
            return 0
        target.blob.unlink()  # a corrupt or truncated blob is never served
    target.blob.parent.mkdir(parents=True, exist_ok=True)
    parts = min(parts, target.file.size // MIN_RANGE)
    if parts > 1 or _ranges_record(target).exists():  # a ranged partial is only ever resumed by ranges
        try:
            return _fetch_ranged(client, target, progress, max(parts, 2))
        except RangesIgnored:
            # The hub sends whole bodies only: one connection, from scratch (the sized partial is no prefix).
            target.partial.unlink(missing_ok=True)
            _ranges_record(target).unlink(missing_ok=True)
    kept = target.partial.stat().st_size if target.partial.exists() else 0
    digest = _digest_of(target.partial, target.file) if target.partial.exists() else _new_digest(target.file)
    for attempt in Retrying(
        retry=retry_if_exception_type(TransientError),
        stop=_give_up,
        wait=wait_exponential(multiplier=0.5, max=30),
        reraise=True,
    ):
        with attempt:
            _append(client, target, digest, progress)
    return _verified(target, digest.hexdigest(), want, target.file.size - kept)


def _give_up(state: RetryCallState) -> bool:
    """6 tries for a dropped connection, a timeout or a 5xx; 2 when the hub refuses connections or its name
    does not resolve (it is down: waiting ~15 s more would not bring it back)."""
    exc = state.outcome.exception() if state.outcome else None
    refused = exc is not None and isinstance(exc.__cause__, httpx.ConnectError)
    return state.attempt_number >= (2 if refused else 6)


class _Totals:
    """Per-file progress plus one `total` line (bytes/s and ETA come from the progress display)."""

    def __init__(self, jobs: list[Target], progress: Progress):
        self.progress, self.done = progress, {j.file.path: 0 for j in jobs}
        self.total = sum(j.file.size for j in jobs)
        self.lock = threading.Lock()

    def __call__(self, path: str, done: int, size: int) -> None:
        with self.lock:  # the display is not thread-safe: one worker reports at a time
            self.done[path] = done
            # The total first: a plain display (not a terminal) follows it alone, from a download's first report.
            self.progress("total", sum(self.done.values()), self.total)
            self.progress(path, done, size)


def fetch_all(jobs: list[Target], token: str | None, progress: Progress, workers: int) -> int:
    """`workers` files at a time (at least one, at most one per distinct blob); the bytes fetched from the hub."""
    progress = _Totals(jobs, progress)
    if token and not all(token_may_go_to(job.url) for job in jobs):
        # rule: hub-token-https
        # Plain http to a non-loopback host would carry the bearer token in clear text: fetch without it.
        token = None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # httpx drops the Authorization header on redirects to another origin (LFS/CDN hosts).
    # Files with identical content share one blob: fetch it once, then link the other paths.
    by_blob: dict[Path, list[Target]] = {}
    for job in jobs:
        by_blob.setdefault(job.blob, []).append(job)
    with httpx.Client(headers=headers, follow_redirects=True, timeout=httpx.Timeout(60.0, connect=15.0)) as client:
        in_flight = max(1, min(workers, len(by_blob)))
        parts = max(1, CONNECTIONS // in_flight)  # one big file takes every connection as ranges
        pool = ThreadPoolExecutor(max_workers=in_flight)
        try:
            futures = [pool.submit(_fetch_locked, client, same[0], progress, parts) for same in by_blob.values()]
            fetched = sum(future.result() for future in futures)
        except (DownloadFailed, LocalFileError) as exc:  # a file failed: the others end, then it says what they did
            pool.shutdown(wait=True, cancel_futures=True)
            raise type(exc)(f"{exc}{_the_others(futures)}") from (exc.__cause__ or exc)
        except BaseException as exc:
            # Ctrl-C or SIGTERM (not an Exception): do not wait here for every file in flight to finish, minutes
            # for a large shard; the CLI then exits without joining the workers (cli._interrupted), and the next
            # apply resumes each .incomplete as after a kill -9. A failed file (an Exception) lets the others end.
            pool.shutdown(wait=isinstance(exc, Exception), cancel_futures=True)
            raise
        pool.shutdown()
    for same in by_blob.values():
        for job in same[1:]:
            _link(job)
    return fetched


def _the_others(futures: list[Future[int]]) -> str:
    """What the download's other files came to once they ended: a failed shard said "nothing of it was downloaded"
    while 393 KB of the checkpoint's other files had arrived, verified and kept (issue 38)."""
    if len(futures) < 2:
        return ""
    ended = [f for f in futures if not f.cancelled()]
    whole = [f.result() for f in ended if f.exception() is None]
    said = [f"{len(whole)} complete and verified in the cache ({sum(whole)} bytes of them from the hub now)"]
    if failed := len(ended) - len(whole) - 1:
        said.append(f"{failed} failed too")
    if skipped := len(futures) - len(ended):
        said.append(f"{skipped} not started")
    return f"; of the download's {len(futures) - 1} other file(s): {', '.join(said)}"


def _fetch_locked(client: httpx.Client, target: Target, progress: Progress, parts: int = 1) -> int:
    """One process at a time per blob (two applies sharing a cache must not append to one partial)."""
    target.blob.parent.mkdir(parents=True, exist_ok=True)
    with open(target.blob.with_name(target.blob.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return fetch(client, target, progress, parts)


def fetch_from_peers(
    jobs: list[Target], peers: tuple[str, ...], repo: str, revision: str, progress: Progress, say: Callable[[str], None]
) -> tuple[list[Target], int]:
    """Each file from the first peer holding it (a kimik3 fleet mirror: adapters/cache_mirror.py), through the same
    fetch as from the hub, checked against the same sha256 (the hub's listing): a copy that fails it is removed and
    refused, and the file is asked of the next peer, then of the hub. Returns the jobs left for the hub and the
    bytes that came from peers. The hub's token is never sent to a peer (a client without it)."""
    totals = _Totals(jobs, progress)
    left: list[Target] = []
    moved = 0
    live = list(peers)
    with httpx.Client(follow_redirects=False, timeout=httpx.Timeout(60.0, connect=5.0)) as client:
        for job in jobs:
            for peer in list(live):
                url = f"{peer.rstrip('/')}/{repo}/resolve/{revision}/{quote(job.file.path)}"
                try:
                    held = client.head(url).status_code == 200
                except httpx.TransportError as exc:
                    # A peer that does not answer is dropped for this download: the hub is the fallback.
                    say(f"peer {shown(peer)} not reachable ({type(exc).__name__}): not asked again")
                    live.remove(peer)
                    continue
                if not held:  # 404: that host does not hold it verified (yet)
                    continue
                try:
                    moved += _fetch_locked(client, replace(job, url=url), totals, CONNECTIONS)
                except (DownloadFailed, HubError) as exc:  # a full disk (LocalFileError) goes up: no source helps
                    say(f"{job.file.path}: the copy from peer {shown(peer)} is refused: {exc}")
                    continue
                say(f"{job.file.path}: from peer {shown(peer)}, sha256 checked")
                break
            else:
                left.append(job)
    return left, moved
