"""Benchmark: kimik3's verified download vs `hf download` vs the fetch-to-disk floor, one run.

    .venv/bin/python bench/download.py [--files 4] [--mib 256]

Serves FILES x MIB random files from the local fixture hub on 127.0.0.1 and fetches the same
folder three ways into fresh caches on the same filesystem:
  floor   parallel plain GETs (httpx, one thread per file) written to disk, then sync
  hf      `hf download --include Q/*` (huggingface_hub's CLI; does not verify sha256)
  kimik3  kimik3's downloader (resumable, sha256-verified as bytes land), then sync
and prints the three throughputs and kimik3's ratios. On these machines the disk (~220 MiB/s),
not loopback, is the limit (shared/TESTING.md §5).

    .venv/bin/python bench/download.py --one-file [--gib 2] [--cap 50]

One file of GIB GiB from a fixture hub that caps each connection at CAP MiB/s (a CDN's per-connection
limit), fetched four ways into fresh caches:
  floor      8 parallel plain range GETs written at their offsets, no hashing, then sync (first and last:
             the faster of the two)
  1 conn     kimik3 with ranges off (one connection: what it did before issue 15), sha256 as bytes land
  ranges     kimik3's 8 ranges, sha256 in file order by a follower thread (the default)
  ranges/end kimik3's 8 ranges, sha256 by one re-read at the end
and prints each throughput and its ratio to the floor (goal: ranges >= 0.9x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import scratch  # noqa: E402
from kimik3_demo.hub import FixtureHub, FixtureRepo  # noqa: E402
from kimik3_demo.quant_files import random_shards, whole_quant  # noqa: E402
from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub  # noqa: E402

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
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HOME": str(cache / "home"),
    }
    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or "hf"
    subprocess.run(
        [hf, "download", REPO, "--revision", REV, "--include", "Q/*", "--cache-dir", str(cache)],
        env=env,
        check=True,
        capture_output=True,
    )


def kimik3(hub: FixtureHub, cache: Path) -> None:
    HuggingFaceHub().download(whole_quant(hub.url, REPO, REV, cache), lambda *_: None)


def timed(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    os.sync()  # count the bytes on disk, not in the page cache
    return time.perf_counter() - start


def ranged_floor(hub: FixtureHub, path: str, size: int, out: Path, parts: int = 8) -> None:
    step = -(-size // parts)
    with open(out, "wb") as f:
        os.ftruncate(f.fileno(), size)
    fd = os.open(out, os.O_WRONLY)

    def one(first: int) -> None:
        last = min(first + step, size) - 1
        url = f"{hub.url}/{REPO}/resolve/{REV}/{path}"
        with httpx.stream("GET", url, headers={"Range": f"bytes={first}-{last}"}) as r:
            offset = first
            for block in r.iter_bytes(1 << 20):
                os.pwrite(fd, block, offset)
                offset += len(block)

    threads = [threading.Thread(target=one, args=(a,)) for a in range(0, size, step)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(fd)


def one_file(args: argparse.Namespace, work: Path) -> None:
    from kimik3_reconciler.adapters import hub_download

    path = work / "src" / "K3-ONE.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    size = int(args.gib * (1 << 30))
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))
    os.sync()
    files = {f"Q/{path.name}": path}
    mib = size / (1 << 20)
    results: dict[str, float] = {}
    with FixtureHub([FixtureRepo(REPO, REV, files)]) as hub:
        hub.faults.bytes_per_second = args.cap << 20
        results["floor"] = timed(lambda: ranged_floor(hub, f"Q/{path.name}", size, work / "floor.gguf"))
        for name, connections, at_end in (("ranges", 8, False), ("ranges/end", 8, True), ("1 conn", 1, False)):
            hub_download.CONNECTIONS, hub_download.HASH_AT_END = connections, at_end
            results[name] = timed(lambda: kimik3(hub, work / name.replace("/", "-").replace(" ", "-")))
        # The floor again, last: the first one may still share the disk with the source file's write-back.
        (work / "floor.gguf").unlink()
        results["floor"] = min(
            results["floor"], timed(lambda: ranged_floor(hub, f"Q/{path.name}", size, work / "floor.gguf"))
        )
    print(f"one file of {mib:.0f} MiB, each connection capped at {args.cap} MiB/s")
    print("| fetch | MiB/s | seconds | × floor |")
    print("|---|---|---|---|")
    for name, seconds in results.items():
        print(f"| {name} | {mib / seconds:.1f} | {seconds:.2f} | {results['floor'] / seconds:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--one-file", action="store_true", help="one large file over a per-connection cap")
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--cap", type=int, default=50, help="MiB/s per connection (--one-file)")
    args = parser.parse_args()
    if args.one_file:
        with scratch(on_disk=True) as work:
            one_file(args, work)
        return
    with scratch(on_disk=True) as work:
        files = random_shards(work / "src", args.files, args.mib << 20)
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
        print(
            f"kimik3 / hf download = {results['hf'] / results['kimik3']:.2f}x   "
            f"kimik3 / floor = {results['floor'] / results['kimik3']:.2f}x   (kimik3 includes sha256 verification)"
        )


if __name__ == "__main__":
    main()
