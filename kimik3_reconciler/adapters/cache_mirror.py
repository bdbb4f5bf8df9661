"""A host's verified model files served to its site as a hub mirror (issue 36 item 4: bytes once per site).

`kimik3 fleet apply` runs one on every host of the rollout (cli/fleet_mirror.py); another host's download then
asks it first (adapters/hf_hub.py's peers), at the hub's own file URL, `/{repo}/resolve/{revision}/{path}`, so the
downloader that fetches from the hub (adapters/hub_download.py: resumable, ranged, sha256-checked) fetches from a
peer unchanged.

Only verified files are served: a snapshot link (`snapshots/<revision>/<path>`) that resolves to a blob in the
repository's `blobs/` folder. kimik3's download renames a blob into place only once its sha256 matched the hub's
and links the snapshot after that, so a partial (`.incomplete`) or a file that failed its hash is never reachable
here: it answers 404, as the hub does for a path it lacks, and the asking host tries its next peer, then the hub.
The asking host checks every byte against the hub's sha256 again (a copy corrupted in transit or on this disk is
refused there). Ranges and HEAD come from aiohttp's FileResponse; nothing is listed (no index, no API).
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

RESOLVE = "/{org}/{name}/resolve/{revision}/{path:.+}"


def verified_file(cache_dir: Path, repo: str, revision: str, path: str) -> Path | None:
    """The blob `repo@revision:path` resolves to in the HF cache at `cache_dir`, when it is a verified one."""
    parts = path.split("/")
    # The path comes from the network: never let it name anything outside the repository's snapshot.
    if any(part in ("", ".", "..") for part in parts) or "/" in revision or revision in (".", ".."):
        return None
    repo_dir = cache_dir / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / revision / path
    if not snapshot.is_symlink():  # kimik3 (and huggingface_hub) link every snapshot file to its blob
        return None
    blob = snapshot.resolve()
    blobs = (repo_dir / "blobs").resolve()
    if blob.parent != blobs or blob.name.endswith(".incomplete") or not blob.is_file():
        return None
    return blob


def mirror_app(cache_dir: Path) -> web.Application:
    async def resolve(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        blob = verified_file(cache_dir, f"{info['org']}/{info['name']}", info["revision"], info["path"])
        if blob is None:
            return web.Response(status=404, headers={"X-Error-Code": "EntryNotFound"}, text="not held here")
        return web.FileResponse(blob, headers={"Content-Type": "application/octet-stream"})

    app = web.Application()
    app.router.add_get(RESOLVE, resolve)  # and HEAD (allow_head): the asking host checks a file is held
    return app


def serve(cache_dir: Path, address: str, port: int) -> None:
    """Serve until SIGTERM/SIGINT (aiohttp's run_app handles both)."""
    web.run_app(mirror_app(cache_dir), host=address, port=port, print=None, access_log=None, handle_signals=True)
