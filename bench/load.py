"""Benchmark (issue 15): how long llama-server takes to load, cold and warm, and what a pre-read reload costs,
printed as ratios from one run.

    .venv/bin/python bench/load.py [--gib 1] [--runs 2]                      # CPU dev machine (demo image)
    .venv/bin/python bench/load.py --model DIR --image TAG --gpus all \\
        --hybrid-args "--n-cpu-moe 52" [--runs 3]                            # a GPU host (see below)

Rows (each the median of --runs):
  cold floor     every shard read once by one reader (16 MiB reads), page cache emptied first
  cold load      `docker run` of the server to /health 200, page cache emptied first
  warm load      the same with every shard already in the page cache
  cold reload    a swap without pre-read, cache emptied: downtime = old container removed -> new /health 200
  pre-read       a reload as kimik3 does it: the old server still serves while the shards are pre-read
                 (adapters/page_cache.py, 4 readers: the time it hides), then the swap; the row is the
                 downtime, as for the cold reload
  hybrid warm    (--gpus and --hybrid-args only) the warm load with the CPU-expert flags, against the
                 all-GPU warm load of the same file
  pre-read x1/x4/fadvise  the pre-read alone, cold, by method (the step uses `read`, 4 workers)

The page cache is emptied with `echo 3 > /proc/sys/vm/drop_caches` when that works (checked with mincore),
else per file with posix_fadvise(DONTNEED) (the dev VM ignores drop_caches; the table says which).

Without --model a synthetic kimi-k3 GGUF of about --gib GiB (2 shards, random weights: the project's tiny
model with wider experts) is written once under .kimik3-demo/bench-load/. On a GPU host give --model the
snapshot folder of a real quant (or the issue's synthetic one), --image the profile's image tag, --gpus as
docker's --gpus takes it (`all`, `device=0`), and --hybrid-args the flags that put the experts on the CPU;
the server gets kimik3's fixed flags (--numa distribute, f16 K/V, --load-mode none, --threads = cores).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3_reconciler.adapters import page_cache  # noqa: E402

NAME = "k3lt-bench-load"
PORT = 19520
DEMO_IMAGE = "kimi-k3-llamacpp:mainline-ad1de39-cpu"


def synthetic_model(gib: float) -> list[Path]:
    """A kimi-k3 GGUF of about `gib` GiB (random f32 weights, 2 shards), written once and kept."""
    from kimik3_reconciler.steps.smoke_model import TinyDims, write_tiny_kimi_k3

    layers, experts = 8, 64
    # experts: 3 matrices of latent x ff per expert per layer (f32): size them to the wanted total
    per_layer = gib * (1 << 30) / layers
    ff = max(32, int((per_layer / (3 * experts * 4)) ** 0.5) // 32 * 32)
    out = ROOT / ".kimik3-demo" / "bench-load" / f"k3-{experts}x{ff}x{layers}"
    shards = sorted(out.glob("*.gguf"))
    if len(shards) == 2:
        return shards
    dims = TinyDims(n_expert=experts, expert_ff=ff, expert_latent=ff)
    return write_tiny_kimi_k3(out, "Kimi-K3-bench", shards=2, layers=layers, dims=dims)


def empty_cache(paths: list[Path]) -> str:
    """Empty the page cache of `paths`; how (drop_caches where the kernel obeys it, else DONTNEED per file)."""
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        if sum(page_cache.resident_bytes(str(p)) for p in paths) == 0:
            return "drop_caches"
    except OSError:
        pass
    for path in paths:
        page_cache.evict(str(path))
    return "posix_fadvise DONTNEED per file"


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def read_all(paths: list[Path]) -> None:
    buffer = bytearray(page_cache.CHUNK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass


class Server:
    """llama-server in a container, as kimik3 launches it (fixed flags), on the bench's own name and port."""

    def __init__(self, args: argparse.Namespace, shards: list[Path]):
        self.args, self.shards = args, shards

    def argv(self, name: str, extra: str) -> list[str]:
        folder = self.shards[0].parent
        gpus = ["--gpus", self.args.gpus] if self.args.gpus else []
        threads = str(os.cpu_count() or 1)
        return ["docker", "run", "-d", "--name", name, "--network", "host", *gpus,
                "-v", f"{folder}:/models:ro", self.args.image, "-m", f"/models/{self.shards[0].name}",
                "--host", "127.0.0.1", "--port", str(PORT), "--numa", "distribute", "--cache-type-k", "f16",
                "--cache-type-v", "f16", "--load-mode", "none", "--threads", threads, "--threads-batch", threads,
                "-c", "2048", *shlex.split(self.args.server_args), *shlex.split(extra)]

    def start(self, name: str = NAME, extra: str = "") -> float:
        """Seconds from `docker run` to /health 200."""
        start = time.perf_counter()
        subprocess.run(self.argv(name, extra), check=True, capture_output=True)
        deadline = start + self.args.timeout
        while time.perf_counter() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except (urllib.error.URLError, OSError):
                pass
            state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", name], capture_output=True,
                                   text=True).stdout.strip()
            if state not in ("running", "created"):
                logs = subprocess.run(["docker", "logs", "--tail", "20", name], capture_output=True, text=True)
                raise RuntimeError(f"server exited while loading:\n{logs.stdout}{logs.stderr}")
            time.sleep(0.05)
        raise RuntimeError(f"not healthy after {self.args.timeout} s")

    @staticmethod
    def remove(name: str = NAME) -> None:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="folder of the GGUF shards (default: a synthetic model)")
    parser.add_argument("--gib", type=float, default=1.0, help="size of the synthetic model")
    parser.add_argument("--image", default=DEMO_IMAGE)
    parser.add_argument("--gpus", default="", help="docker --gpus value (GPU host)")
    parser.add_argument("--server-args", default="", help="more llama-server flags for every load (-ngl 999 ...)")
    parser.add_argument("--hybrid-args", default="", help="flags that put the experts on the CPU (GPU host)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    shards = sorted(args.model.glob("*.gguf")) if args.model else synthetic_model(args.gib)
    paths = [str(p) for p in shards]
    total = sum(p.stat().st_size for p in shards)
    server = Server(args, shards)
    rows: dict[str, list[float]] = {}
    how = ""

    def row(name: str, seconds: float) -> None:
        rows.setdefault(name, []).append(seconds)

    Server.remove()
    try:
        for _ in range(args.runs):
            how = empty_cache(shards)
            row("cold floor (1 reader)", timed(lambda: read_all(shards)))
            for method, workers in (("read", 1), ("read", 4), ("fadvise", 4)):
                empty_cache(shards)
                row(f"pre-read alone, {method} x{workers}, cold",
                    timed(lambda: page_cache.preread(paths, workers, lambda n: None, method)))
            empty_cache(shards)
            row("cold load", server.start())
            Server.remove()
            row("warm load", server.start())  # the cold load left every shard in the cache
            # Reloads: the old server still runs (and serves) until the swap; downtime = its removal + the load.
            empty_cache(shards)
            row("cold reload: downtime", timed(lambda: (Server.remove(), server.start())))
            empty_cache(shards)
            row("pre-read while serving (hidden)", timed(lambda: page_cache.preread(paths, 4, lambda n: None)))
            row("pre-read reload: downtime", timed(lambda: (Server.remove(), server.start())))
            Server.remove()
            if args.gpus and args.hybrid_args:
                row("hybrid warm load", server.start(extra=args.hybrid_args))
                Server.remove()
    finally:
        Server.remove()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"model: {len(shards)} shards, {total / (1 << 30):.2f} GiB ({shards[0].parent}); image {args.image}; "
          f"{args.runs} run(s), median; cache emptied with {how}")
    print("| run | seconds | GiB/s | × cold floor | × cold load |")
    print("|---|---|---|---|---|")
    for name, seconds in med.items():
        print(f"| {name} | {seconds:.2f} | {total / (1 << 30) / seconds:.2f} | "
              f"{seconds / med['cold floor (1 reader)']:.2f} | {seconds / med['cold load']:.2f} |")
    print(f"cold load / cold floor = {med['cold load'] / med['cold floor (1 reader)']:.2f}x   "
          f"warm / cold load = {med['warm load'] / med['cold load']:.2f}x   "
          f"pre-read reload / cold reload downtime = "
          f"{med['pre-read reload: downtime'] / med['cold reload: downtime']:.2f}x")
    if "hybrid warm load" in med:
        print(f"hybrid warm / all-GPU warm = {med['hybrid warm load'] / med['warm load']:.2f}x")


if __name__ == "__main__":
    main()
