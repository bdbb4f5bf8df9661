"""Benchmark: kimik3's verified download vs `hf download` vs the fetch-to-disk floor, one run.

    .venv/bin/python bench/download.py [--files 4] [--mib 256]

Serves FILES x MIB random files from the local fixture hub on 127.0.0.1 and fetches the same
folder three ways into fresh caches on the same filesystem:
  floor   parallel plain GETs (httpx, one thread per file) written to disk, then sync
  hf      `hf download --include Q/*` (huggingface_hub's CLI; does not verify sha256)
  kimik3  kimik3's downloader (resumable, sha256-verified as bytes land), then sync
and prints the three throughputs and kimik3's ratios. On these machines the disk (~220 MiB/s),
not loopback, is the limit (shared/TESTING.md §5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3_demo.hub import FixtureHub, FixtureRepo  # noqa: E402
from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub  # noqa: E402
from kimik3_reconciler.model.specs import ModelDownload  # noqa: E402

REPO, REV = "kimik3-bench/big-GGUF", "be" * 20


def floor(hub: FixtureHub, paths: list[str], out: Path) -> None:
    def one(path: str) -> None:
        with httpx.stream("GET", f"{hub.url}/{REPO}/resolve/{REV}/{path}") as r, open(out / Path(path).name, "wb") as f:
            for block in r.iter_bytes(8 << 20):
                f.write(block)
    threads = [threading.Thread(target=one, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def hf_download(hub: FixtureHub, cache: Path) -> None:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HOME": str(cache / "home")}
    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or "hf"
    subprocess.run([hf, "download", REPO, "--revision", REV, "--include", "Q/*", "--cache-dir", str(cache)],
                   env=env, check=True, capture_output=True)


def kimik3(hub: FixtureHub, cache: Path) -> None:
    files = tuple(HuggingFaceHub().list_files(REPO, REV, ["Q"], hub.url))
    spec = ModelDownload(repo=REPO, revision=REV, quant="Q", endpoint=hub.url, cache_dir=str(cache), files=files,
                         missing=tuple(f.path for f in files), manifest_key="-")
    HuggingFaceHub().download(spec, lambda *_: None)


def timed(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    os.sync()  # count the bytes on disk, not in the page cache
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kimik3-bench-", dir=ROOT / ".kimik3-demo" if (ROOT / ".kimik3-demo").exists()
                                 else None))
    try:
        files = {}
        for i in range(args.files):
            path = work / "src" / f"K3-Q-{i + 1:05d}-of-{args.files:05d}.gguf"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                for _ in range(args.mib):
                    f.write(os.urandom(1 << 20))
            files[f"Q/{path.name}"] = path
        os.sync()
        total = args.files * args.mib
        with FixtureHub([FixtureRepo(REPO, REV, files)]) as hub:
            (work / "floor").mkdir()
            results = {
                "floor": timed(lambda: floor(hub, list(files), work / "floor")),
                "hf": timed(lambda: hf_download(hub, work / "hf")),
                "kimik3": timed(lambda: kimik3(hub, work / "kimik3")),
            }
        for name, seconds in results.items():
            print(f"{name:<7} {total / seconds:7.1f} MiB/s  ({seconds:.2f} s for {total} MiB)")
        print(f"kimik3 / hf download = {results['hf'] / results['kimik3']:.2f}x   "
              f"kimik3 / floor = {results['floor'] / results['kimik3']:.2f}x   (kimik3 includes sha256 verification)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
