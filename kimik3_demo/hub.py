"""A small local Hugging Face hub (stdlib HTTP server) that the real `huggingface_hub` client can use.

It answers exactly what reference/hf-hub.md lists, for model repos only:

    GET  /api/models/{org}/{name}[/revision/{rev}][?blobs=true]   model info
    GET  /api/models/{org}/{name}/tree/{rev}[/{path}]?recursive=&expand=
    POST /api/models/{org}/{name}/paths-info/{rev}                 form body: paths=…&expand=…
    HEAD/GET /{org}/{name}/resolve/{rev}/{path}                    with Range support
    GET  /api/agent-harnesses                                      always 404, not logged

Every file is served as an LFS file (ETag = the quoted sha256, plus X-Linked-Etag and
X-Linked-Size); `{rev}` is the repo's 40-hex revision or `main`. Failures are 404s carrying
X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound) and never 5xx, which the client
would retry. Listings may declare sizes other than the real ones (sizing-gate tests); the
bodies served are always the real files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

from kimik3_demo.hub_faults import HubFaults

FIXED_DATE = "2025-01-01T00:00:00.000Z"
_CHUNK = 1 << 20


@dataclass
class FixtureRepo:
    """One model repo at one commit: `files` maps a path in the repo to the local file served for it."""

    repo_id: str
    revision: str  # the 40-hex commit the repo answers for
    files: dict[str, Path]
    declared_sizes: dict[str, int] = field(default_factory=dict)  # path -> size reported in listings


@dataclass(frozen=True)
class _Blob:
    """A served file with its hashes computed once."""

    path: str
    local: Path
    size: int  # real size of the body
    listed_size: int  # size reported in listings
    sha256: str
    git_oid: str  # git blob sha1 of the LFS pointer, as the Hub reports it
    pointer_size: int


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _index_blob(repo: FixtureRepo, path: str, local: Path) -> _Blob:
    sha256, size = _file_sha256(local), local.stat().st_size
    listed = repo.declared_sizes.get(path, size)
    pointer = _lfs_pointer(sha256, listed)
    return _Blob(path, local, size, listed, sha256, _git_blob_sha1(pointer), len(pointer))


class _Repo:
    """A FixtureRepo indexed for answering: blobs by path and every folder path."""

    def __init__(self, repo: FixtureRepo) -> None:
        self.repo_id, self.revision = repo.repo_id, repo.revision
        self.blobs = {p: _index_blob(repo, p, Path(local)) for p, local in sorted(repo.files.items())}
        self.folders = {"/".join(p.split("/")[:i]) for p in self.blobs for i in range(1, p.count("/") + 1)}

    def knows_revision(self, revision: str) -> bool:
        return revision in (self.revision, "main")

    def _last_commit(self) -> dict:
        return {"id": self.revision, "title": "Upload tiny model", "date": FIXED_DATE}

    def file_entry(self, blob: _Blob, expand: bool) -> dict:
        entry = {
            "type": "file",
            "oid": blob.git_oid,
            "size": blob.listed_size,
            "path": blob.path,
            "lfs": {"oid": blob.sha256, "size": blob.listed_size, "pointerSize": blob.pointer_size},
        }
        if expand:
            entry["lastCommit"] = self._last_commit()
        return entry

    def folder_entry(self, path: str, expand: bool) -> dict:
        entry = {"type": "directory", "oid": _git_blob_sha1(path.encode()), "size": 0, "path": path}
        if expand:
            entry["lastCommit"] = self._last_commit()
        return entry

    def entry(self, path: str, expand: bool) -> dict | None:
        if path in self.blobs:
            return self.file_entry(self.blobs[path], expand)
        if path in self.folders:
            return self.folder_entry(path, expand)
        return None

    def tree(self, folder: str, recursive: bool, expand: bool) -> list[dict] | None:
        """Entries under `folder` ("" = root), or None when it is not a folder."""
        if folder and folder not in self.folders:
            return None
        prefix = f"{folder}/" if folder else ""
        paths = sorted(p for p in [*self.folders, *self.blobs] if p.startswith(prefix))
        if not recursive:
            paths = [p for p in paths if "/" not in p[len(prefix) :]]
        return [self.entry(p, expand) for p in paths]

    def info(self, blobs: bool) -> dict:
        siblings = []
        for blob in self.blobs.values():
            sibling: dict = {"rfilename": blob.path}
            if blobs:
                sibling.update(
                    size=blob.listed_size,
                    blobId=blob.git_oid,
                    lfs={"sha256": blob.sha256, "size": blob.listed_size, "pointerSize": blob.pointer_size},
                )
            siblings.append(sibling)
        return {
            "_id": self.revision[:24],
            "id": self.repo_id,
            "modelId": self.repo_id,
            "sha": self.revision,
            "private": False,
            "disabled": False,
            "gated": False,
            "tags": ["gguf"],
            "lastModified": FIXED_DATE,
            "createdAt": FIXED_DATE,
            "siblings": siblings,
        }


class _NotFound(Exception):
    """A 404 answer: `code` goes into X-Error-Code."""

    def __init__(self, code: str, message: str, commit: str | None = None) -> None:
        super().__init__(message)
        self.code, self.commit = code, commit


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single `bytes=a-[b]` or `bytes=-n` range, or None for the whole body."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes=") :].strip().partition("-")
    if not first:
        length = int(last)
        return max(0, size - length), size - 1
    return int(first), min(int(last), size - 1) if last else size - 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kimik3-fixture-hub"
    server: _HubServer

    def log_message(self, format: str, *args) -> None:
        pass  # quiet: tests read FixtureHub.requests instead

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # --- routing ------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        segments = [unquote(s) for s in url.path.split("/")[1:]]
        body = self._read_body()
        if segments[:2] == ["api", "agent-harnesses"]:
            return self._send_json(404, {"error": "Not Found"})
        self.server.requests.append((method, unquote(url.path)))
        self.server.authorizations.append((method, unquote(url.path), self.headers.get("Authorization")))
        self.server.ranges.append((method, unquote(url.path), self.headers.get("Range")))
        try:
            self._route(method, segments, parse_qs(url.query), body)
        except _NotFound as missing:
            self._send_not_found(missing)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _route(self, method: str, segments: list[str], query: dict, body: bytes) -> None:
        if segments[:2] == ["api", "models"] and len(segments) >= 4:
            repo = self._repo("/".join(segments[2:4]))
            rest = segments[4:]
            if not rest and method == "GET":
                return self._model_info(repo, "main", query)
            if len(rest) >= 2 and rest[0] == "revision" and method == "GET":
                return self._model_info(repo, "/".join(rest[1:]), query)
            if len(rest) >= 2 and rest[0] == "tree" and method == "GET":
                return self._tree(repo, rest[1], "/".join(rest[2:]), query)
            if len(rest) == 2 and rest[0] == "paths-info" and method == "POST":
                return self._paths_info(repo, rest[1], parse_qs(body.decode()))
        elif len(segments) >= 5 and segments[2] == "resolve" and method in ("GET", "HEAD"):
            repo = self._repo("/".join(segments[:2]))
            return self._resolve(repo, segments[3], "/".join(segments[4:]), head=method == "HEAD")
        self._send_json(404, {"error": "Not Found"})

    def _repo(self, repo_id: str) -> _Repo:
        repo = self.server.repos.get(repo_id)
        if repo is None:
            raise _NotFound("RepoNotFound", f"Repository {repo_id} not found")
        return repo

    @staticmethod
    def _check_revision(repo: _Repo, revision: str) -> None:
        if not repo.knows_revision(revision):
            raise _NotFound("RevisionNotFound", f"Invalid rev id: {revision}")

    # --- endpoints ----------------------------------------------------------------------------

    def _model_info(self, repo: _Repo, revision: str, query: dict) -> None:
        self._check_revision(repo, revision)
        self._send_json(200, repo.info(blobs=_flag(query, "blobs")))

    def _tree(self, repo: _Repo, revision: str, folder: str, query: dict) -> None:
        self._check_revision(repo, revision)
        entries = repo.tree(folder.strip("/"), _flag(query, "recursive"), _flag(query, "expand"))
        if entries is None:
            raise _NotFound("EntryNotFound", f"{folder} does not exist on {revision}", repo.revision)
        self._send_json(200, entries)

    def _paths_info(self, repo: _Repo, revision: str, form: dict) -> None:
        self._check_revision(repo, revision)
        expand = _flag(form, "expand")
        entries = [repo.entry(p.strip("/"), expand) for p in form.get("paths", [])]
        self._send_json(200, [e for e in entries if e is not None])

    def _resolve(self, repo: _Repo, revision: str, path: str, head: bool) -> None:
        self._check_revision(repo, revision)
        blob = repo.blobs.get(path)
        if blob is None or path in self.server.faults.missing:
            raise _NotFound("EntryNotFound", f"{path} does not exist on {revision}", repo.revision)
        try:
            span = _parse_range(self.headers.get("Range"), blob.size)
        except ValueError:
            span = None
        if span is not None and span[0] > span[1]:
            return self._send_range_not_satisfiable(blob)
        status, (first, last) = (200, (0, blob.size - 1)) if span is None else (206, span)
        self.send_response(status)
        self._send_blob_headers(repo, blob, last - first + 1)
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{blob.size}")
        self.end_headers()
        if not head:
            self._send_file(blob, first, last - first + 1)

    # --- responses ----------------------------------------------------------------------------

    def _send_blob_headers(self, repo: _Repo, blob: _Blob, length: int) -> None:
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{blob.sha256}"')
        self.send_header("X-Linked-Etag", f'"{blob.sha256}"')
        self.send_header("X-Linked-Size", str(blob.size))
        self.send_header("X-Repo-Commit", repo.revision)

    def _send_file(self, blob: _Blob, offset: int, length: int) -> None:
        with open(blob.local, "rb") as handle:
            if length > 0:
                self.server.faults.send(self.connection, handle, blob.path, offset, length)

    def _send_range_not_satisfiable(self, blob: _Blob) -> None:
        self.send_response(416)
        self.send_header("Content-Range", f"bytes */{blob.size}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_not_found(self, missing: _NotFound) -> None:
        body = json.dumps({"error": str(missing)}).encode()
        self.send_response(404)
        self.send_header("X-Error-Code", missing.code)
        self.send_header("X-Error-Message", str(missing))
        if missing.commit:
            self.send_header("X-Repo-Commit", missing.commit)
        self._finish(body, "application/json")

    def _send_json(self, status: int, payload) -> None:
        self.send_response(status)
        self._finish(json.dumps(payload).encode(), "application/json")

    def _finish(self, body: bytes, content_type: str) -> None:
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""


def _flag(query: dict, name: str) -> bool:
    return any(v.lower() in ("1", "true") for v in query.get(name, []))


class _HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], repos: dict[str, _Repo]) -> None:
        super().__init__(address, _Handler)
        self.repos = repos
        self.requests: list[tuple[str, str]] = []
        self.authorizations: list[tuple[str, str, str | None]] = []
        self.ranges: list[tuple[str, str, str | None]] = []  # (method, path, Range header or None)
        self.faults = HubFaults()


class FixtureHub:
    """Serve `repos` on http://host:port (port 0 = any free port) from a background thread."""

    def __init__(self, repos: list[FixtureRepo], host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = _HubServer((host, port), {r.repo_id: _Repo(r) for r in repos})
        self._thread: threading.Thread | None = None
        self.faults = self._server.faults  # tests configure cuts, 404s, throttling; read bytes served
        bound_host, bound_port = self._server.server_address[:2]
        self.url = f"http://{bound_host}:{bound_port}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request so far, path percent-decoded without the query string."""
        return self._server.requests

    @property
    def authorizations(self) -> list[tuple[str, str, str | None]]:
        """(method, path, Authorization header or None) of every request so far: which ones carried a token."""
        return self._server.authorizations

    @property
    def whole_downloads(self) -> list[str]:
        """The repo path of every GET of a file's whole body (no Range: not a header read, not a resumed part)."""
        return [
            path.split("/resolve/", 1)[1].split("/", 1)[1]
            for method, path, span in self._server.ranges
            if method == "GET" and "/resolve/" in path and span is None
        ]

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fixture-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def repos_from_root(root: Path) -> list[FixtureRepo]:
    """Every `root/<org>/<name>/revision.txt` + `files/…` (+ optional `declared_sizes.json`) as a repo."""
    repos = []
    for revision_file in sorted(Path(root).glob("*/*/revision.txt")):
        repo_dir = revision_file.parent
        files_dir = repo_dir / "files"
        files = {p.relative_to(files_dir).as_posix(): p for p in sorted(files_dir.rglob("*")) if p.is_file()}
        sizes_file = repo_dir / "declared_sizes.json"
        declared = json.loads(sizes_file.read_text()) if sizes_file.exists() else {}
        repo_id = f"{repo_dir.parent.name}/{repo_dir.name}"
        repos.append(FixtureRepo(repo_id, revision_file.read_text().strip(), files, declared))
    return repos


def main(argv: list[str] | None = None) -> None:
    """`python -m kimik3_demo.hub --root DIR --port 18080`: serve every repo under DIR."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    args = parser.parse_args(argv)
    repos = repos_from_root(args.root)
    hub = FixtureHub(repos, host=args.host, port=args.port)
    for repo in repos:
        print(f"serving {repo.repo_id}@{repo.revision} ({len(repo.files)} files) on {hub.url}", flush=True)
    try:
        hub.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
