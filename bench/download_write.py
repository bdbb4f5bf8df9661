"""Benchmark: the one-connection download writing bytes as they arrive (kimik3 now, issue 38: a connection cut
inside an 8 MiB block lost what had arrived) against re-chunking them into 8 MiB blocks first (kimik3 before),
alternated in one run.

    .venv/bin/python bench/download_write.py [--files 4] [--mib 48] [--rounds 5]

Serves FILES x MIB random files (below the ranged-fetch threshold, so each goes over one connection) from the local
fixture hub, and fetches them with kimik3's downloader (sha256 as bytes land, then sync) into a fresh cache per try,
the two ways alternated ROUNDS times. Prints each round's MiB/s and the ratio as-received / re-chunked: its median
and its spread (min..max). The baseline is the earlier `_append`, kept here verbatim but for its name.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import scratch  # noqa: E402
from kimik3_demo.hub import FixtureHub, FixtureRepo  # noqa: E402
from kimik3_demo.quant_files import random_shards, whole_quant  # noqa: E402
from kimik3_reconciler.adapters import hub_download  # noqa: E402
from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub  # noqa: E402
from kimik3_reconciler.adapters.translate import translated  # noqa: E402
from kimik3_reconciler.errors import DownloadFailed  # noqa: E402

REPO, REV = "kimik3-bench/write-GGUF", "bf" * 20
AS_RECEIVED = hub_download._append


def rechunked(client: httpx.Client, target: hub_download.Target, digest: hashlib._Hash, progress) -> None:  # noqa: ANN001
    """kimik3's `_append` before issue 38: blocks of CHUNK (8 MiB) gathered, then written."""
    start = target.partial.stat().st_size if target.partial.exists() else 0
    if start >= target.file.size:
        return
    headers = {"Range": f"bytes={start}-"} if start else {}
    with translated(lambda exc: hub_download._download_error(exc, target)):
        with client.stream("GET", target.url, headers=headers) as response:
            hub_download._raise_for(response, target)
            if start and response.status_code == 200:
                raise DownloadFailed(f"{target.file.path}: the server ignored the Range request")
            with open(target.partial, "ab") as out:
                done = start
                for block in response.iter_bytes(hub_download.CHUNK):
                    digest.update(block)
                    out.write(block)
                    done += len(block)
                    progress(target.file.path, done, target.file.size)
                out.flush()
                os.fsync(out.fileno())


def fetch(hub: FixtureHub, cache: Path, append) -> float:  # noqa: ANN001
    hub_download._append = append
    spec = whole_quant(hub.url, REPO, REV, cache)
    start = time.perf_counter()
    HuggingFaceHub().download(spec, lambda *_: None)
    os.sync()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--mib", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with scratch() as work:
        files = random_shards(work / "src", args.files, args.mib << 20)
        os.sync()
        total, ratios = args.files * args.mib, []
        with FixtureHub([FixtureRepo(REPO, REV, files)]) as hub:
            for r in range(args.rounds):
                pair = {}
                for name, append in (("as-received", AS_RECEIVED), ("re-chunked", rechunked))[:: 1 if r % 2 else -1]:
                    cache = work / f"{name}-{r}"
                    pair[name] = fetch(hub, cache, append)
                    shutil.rmtree(cache)
                ratios.append(pair["re-chunked"] / pair["as-received"])  # > 1: as-received is faster
                print(
                    f"round {r + 1}: as-received {total / pair['as-received']:6.1f} MiB/s, re-chunked "
                    f"{total / pair['re-chunked']:6.1f} MiB/s, ratio {ratios[-1]:.2f}"
                )
        hub_download._append = AS_RECEIVED
        print(
            f"as-received / re-chunked throughput: median {statistics.median(ratios):.2f}x "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} rounds)"
        )


if __name__ == "__main__":
    main()
