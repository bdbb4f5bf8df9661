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

--partial-preread (issue 27 item 6) measures only reloads of a serving server, with a balloon process
(bench/balloon.py: anonymous memory, mlock'd where allowed, else every page touched) holding RAM so that the
model does not fit in the page cache twice: MemAvailable less the reserve (--reserve, default kimik3's)
keeps --cache-share of it. First
--reference-draws whole pre-reads that fit (no balloon yet: the warm reference), then --runs rounds of three
reloads in rotating order: no pre-read (cold), partial (the bytes planning/preread_step.partial_budget gives for
the MemAvailable seen then: the first bytes of the files in order, read by the step's adapter) and full (the
whole model read anyway, as before issue 27's rule skipped it). Printed: each mode's median downtime, its spread,
its ratio to the cold median (per draw too), and kimik3's predicted partial downtime against the measured one.
    bench/load.py --partial-preread --model DIR --native BINDIR --argv-file ARGV.json --runs 3 --json OUT.json

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
import json
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
sys.path[:0] = [str(ROOT), str(ROOT / "tools" / "gpu_proof")]

from native_runner import stop_process  # noqa: E402

from kimik3_reconciler.adapters import page_cache  # noqa: E402
from kimik3_reconciler.engines.llamacpp.launch import owned_flags  # noqa: E402

NAME = "k3lt-bench-load"
PORT = 19520
DEMO_IMAGE = "kimi-k3-llamacpp:mainline-ad1de39-cpu"


def synthetic_model(gib: float) -> list[Path]:
    """A kimi-k3 GGUF of about `gib` GiB (random f32 weights, 2 shards), written once and kept."""
    from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3

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
        threads = os.cpu_count() or 1
        return [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            *gpus,
            "-v",
            f"{folder}:/models:ro",
            self.args.image,
            "-m",
            f"/models/{self.shards[0].name}",
            "--host",
            "127.0.0.1",
            "--port",
            str(PORT),
            *owned_flags(threads),  # kimik3's own: one source with the server it renders
            "-c",
            "2048",
            *shlex.split(self.args.server_args),
            *shlex.split(extra),
        ]

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
            state = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Status}}", name], capture_output=True, text=True
            ).stdout.strip()
            if state not in ("running", "created"):
                logs = subprocess.run(["docker", "logs", "--tail", "20", name], capture_output=True, text=True)
                raise RuntimeError(f"server exited while loading:\n{logs.stdout}{logs.stderr}")
            time.sleep(0.05)
        raise RuntimeError(f"not healthy after {self.args.timeout} s")

    @staticmethod
    def remove(name: str = NAME) -> None:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


# --- issue 27: partial pre-read under a balloon ----------------------------------------------------------------

MODES = ("none", "partial", "full")


def meminfo() -> dict[str, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0]) * 1024
    return values


class NativeServer:
    """llama-server started from a build folder (the GPU host has no Docker) with a fixed argv, kimik3's rendered
    one (tools/gpu_proof/run-preread.sh writes it); the bench's native stand-in for `Server`."""

    def __init__(self, bindir: Path, argv: list[str], timeout: float, logs: Path):
        self.bindir, self.argv, self.timeout, self.logs = bindir, argv, timeout, logs
        host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
        port = argv[argv.index("--port") + 1] if "--port" in argv else "8080"
        self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/health"
        self.process: subprocess.Popen | None = None
        self.count = 0

    def start(self) -> float:
        """Seconds from the exec to /health 200."""
        self.count += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"server-{self.count:03d}.log"
        start = time.perf_counter()
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                [str(self.bindir / "llama-server"), *self.argv],
                cwd=self.bindir,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LD_LIBRARY_PATH": str(self.bindir)},
            )
        while time.perf_counter() - start < self.timeout:
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except (urllib.error.URLError, OSError):
                pass
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited {self.process.returncode} while loading:\n"
                    + log.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"not healthy after {self.timeout} s ({log})")

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 60)


class DockerServer:
    """The bench's container, for the partial mode on a host with Docker (the CPU dev machine)."""

    def __init__(self, server: Server):
        self.server = server

    def start(self) -> float:
        return self.server.start()

    def stop(self) -> None:
        Server.remove()


class Balloon:
    """bench/balloon.py holding `size` bytes until closed."""

    def __init__(self, size: int):
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "balloon.py"), str(size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            raise RuntimeError(f"the balloon of {size} bytes did not start (exit {self.process.wait()})")
        self.facts = json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def resident(paths: list[str]) -> int:
    return sum(page_cache.resident_bytes(p) for p in paths)


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}" if values else "-"


def partial_preread(args: argparse.Namespace, shards: list[Path]) -> None:
    """Reload downtime, as a ratio of the cold one, for no, partial (kimik3's plan: what fits beside the reserve)
    and full pre-read, with a balloon holding RAM so that the model does not fit twice; alternating draws."""
    from kimik3_reconciler.planning.preread_step import partial_budget, reserve_bytes

    paths = [str(p) for p in shards]
    total = sum(p.stat().st_size for p in shards)
    deadline = args.deadline or float("inf")
    if args.native:
        server = NativeServer(args.native, json.loads(args.argv_file.read_text()), args.timeout, args.logs)
    else:
        server = DockerServer(Server(args, shards))
    draws: list[dict] = []
    facts: dict = {"model_bytes": total, "files": len(shards), "native": bool(args.native)}
    balloon: Balloon | None = None

    def left() -> float:
        return deadline - time.time()

    def available() -> int:
        return args.available if args.available else meminfo()["MemAvailable"]

    def reload(mode: str, r: int) -> None:
        """One draw: the cache emptied, the pre-read `mode` asks for while the old server serves, then the swap."""
        how = empty_cache(shards)
        row: dict = {"mode": mode, "round": r, "emptied_by": how, "mem_available": available()}
        read = None if mode == "none" else total
        if mode == "partial":
            read = partial_budget(row["mem_available"], facts["reserve"], total)
            row["planned"] = "none fits" if read is None else ("whole" if read >= total else "partial")
            read = read if read is not None else 0
        elif mode.startswith("full"):
            row["planned"] = "whole (forced)"
        if read:
            started = time.perf_counter()
            page_cache.preread(paths, args.workers, lambda n: None, limit=None if read >= total else read)
            row["preread_s"] = round(time.perf_counter() - started, 3)
        row["preread_bytes"] = read or 0
        row["cached_before_swap"] = resident(paths)
        if balloon is not None:  # the OOM killer's first pick is the largest process: a dead balloon voids the draw
            row["balloon_alive"] = balloon.process.poll() is None
        started = time.perf_counter()
        server.stop()
        row["load_s"] = round(server.start(), 3)
        row["downtime_s"] = round(time.perf_counter() - started, 3)
        row["cached_after_load"] = resident(paths)  # what the cache kept of the model through the load
        row["at"] = time.strftime("%H:%M:%S")
        draws.append(row)
        print(json.dumps(row), flush=True)

    try:
        server.stop()
        empty_cache(shards)
        facts["first_cold_load_s"] = round(server.start(), 3)
        meta = meminfo()
        facts["mem_total"], facts["reserve_kimik3"] = meta["MemTotal"], reserve_bytes(meta["MemTotal"])
        facts["reserve"] = int(args.reserve) if args.reserve is not None else facts["reserve_kimik3"]
        # The reference for the plan's prediction: a whole pre-read that fits (no balloon yet), as this host's
        # warm record would be made.
        for r in range(args.reference_draws):
            if left() < 120:
                break
            reload("full, fits (no balloon)", r)
        empty_cache(shards)
        avail = available()
        size = (
            args.balloon
            if args.balloon is not None
            else max(0, avail - facts["reserve"] - int(args.cache_share * total))
        )
        facts["mem_available_before_balloon"] = avail
        balloon = Balloon(size)
        facts["balloon"] = balloon.facts
        facts["mem_available_with_balloon"] = available()
        print(json.dumps(facts), flush=True)
        per_round = 0.0
        for r in range(args.runs):
            started = time.time()
            if left() < (1.2 * per_round if r else 60) + 20:
                print(f"stopping after {r} round(s): {left():.0f} s left", flush=True)
                break
            for mode in MODES[r % 3 :] + MODES[: r % 3]:  # rotated: no mode always first after the balloon settles
                reload(mode, r)
            per_round = time.time() - started
    except Exception as exc:  # noqa: BLE001 - the draws so far are still reported (and written), then it fails
        facts["error"] = f"{type(exc).__name__}: {str(exc)[-2000:]}"
        print(f"stopped by an error: {facts['error']}", flush=True)
    finally:
        server.stop()
        if balloon is not None:
            balloon.close()
    report_partial(args, facts, draws)
    if "error" in facts:
        raise SystemExit(1)


def report_partial(args: argparse.Namespace, facts: dict, draws: list[dict]) -> None:
    by: dict[str, list[dict]] = {}
    for row in draws:
        by.setdefault(row["mode"], []).append(row)
    med = {mode: statistics.median(r["downtime_s"] for r in rows) for mode, rows in by.items()}
    cold = med.get("none")
    total = facts["model_bytes"]
    balloon = facts.get("balloon", {})
    print(
        f"model: {facts['files']} files, {total / (1 << 30):.2f} GiB; balloon {balloon.get('bytes', 0) / (1 << 30):.1f}"
        f" GiB ({balloon.get('how')}, swap {balloon.get('swap_total', 0) >> 20} MiB); MemAvailable "
        f"{facts.get('mem_available_with_balloon', 0) / (1 << 30):.1f} GiB with it, reserve "
        f"{facts.get('reserve', 0) / (1 << 30):.1f} GiB (kimik3's for this host: "
        f"{facts.get('reserve_kimik3', 0) / (1 << 30):.1f} GiB)"
    )
    dead = [r for r in draws if r.get("balloon_alive") is False]
    if dead:
        print(f"WARNING: the balloon was gone in {len(dead)} draw(s): those ran without the RAM it held")
    print(
        "| pre-read | draws | read GiB | cached at swap | downtime s (median) | spread | × cold (median) | × cold per draw |"
    )
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for mode in ("none", "partial", "full", "full, fits (no balloon)"):
        rows = by.get(mode)
        if not rows:
            continue
        ratios = [r["downtime_s"] / cold for r in rows] if cold else []
        cached = statistics.median(r["cached_before_swap"] for r in rows) / total
        summary[mode] = {
            "n": len(rows),
            "downtime_s": med[mode],
            "ratio": round(med[mode] / cold, 3) if cold else None,
            "ratios": [round(x, 3) for x in ratios],
            "cached_share": round(cached, 3),
            "preread_gib": round(statistics.median(r["preread_bytes"] for r in rows) / (1 << 30), 2),
        }
        print(
            f"| {mode} | {len(rows)} | {summary[mode]['preread_gib']} | {100 * cached:.0f} % | {med[mode]:.2f} | "
            f"{spread([r['downtime_s'] for r in rows])} | {summary[mode]['ratio']} | "
            f"{', '.join(f'{x:.2f}' for x in ratios)} |"
        )
    # kimik3's prediction for the partial draws (planning/health_step.predicted_partial_load_s) from this host's
    # own cold and warm reloads (the records it would have), against the partial draws measured
    warm = med.get("full, fits (no balloon)")
    if cold and warm and "partial" in by:
        share = statistics.median(r["preread_bytes"] for r in by["partial"]) / total
        predicted = share * warm + (1 - share) * cold
        summary["partial_predicted_s"] = round(predicted, 3)
        summary["partial_measured_over_predicted"] = round(med["partial"] / predicted, 3)
        print(
            f"partial: {100 * share:.0f} % pre-read; predicted downtime {predicted:.2f} s ({share:.2f} × warm "
            f"{warm:.2f} s + {1 - share:.2f} × cold {cold:.2f} s), measured {med['partial']:.2f} s = "
            f"{med['partial'] / predicted:.2f}× the prediction"
        )
    print(
        "reload downtime / cold: " + ", ".join(f"{m} {s['ratio']}" for m, s in summary.items() if isinstance(s, dict))
    )
    if args.json:
        args.json.write_text(json.dumps({"facts": facts, "summary": summary, "draws": draws}, indent=1))


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
    partial = parser.add_argument_group("--partial-preread (issue 27): reload downtime under a balloon")
    partial.add_argument(
        "--partial-preread",
        action="store_true",
        help="only the reloads: no, partial and full pre-read alternating, --runs rounds",
    )
    partial.add_argument("--native", type=Path, help="llama-server's build folder (no Docker: the GPU host)")
    partial.add_argument("--argv-file", type=Path, help="JSON list: the server's argv after llama-server (--native)")
    partial.add_argument(
        "--cache-share",
        type=float,
        default=0.5,
        help="share of the model the page cache keeps beside the reserve once the balloon holds RAM",
    )
    partial.add_argument("--balloon", type=float, help="bytes the balloon holds (default: sized by --cache-share)")
    partial.add_argument(
        "--reserve",
        type=float,
        help="bytes kept free beside the cache (default: kimik3's reserve for this host, 10 %% of "
        "RAM); the partial budget and the balloon's size use it",
    )
    partial.add_argument(
        "--available",
        type=int,
        default=0,
        help="MemAvailable as the plan sees it (a dry run's forced budget; default: /proc/meminfo)",
    )
    partial.add_argument(
        "--reference-draws",
        type=int,
        default=1,
        help="whole pre-reads before the balloon (the warm reference of the prediction)",
    )
    partial.add_argument("--workers", type=int, default=4, help="pre-read readers (the step's default)")
    partial.add_argument("--deadline", type=float, default=0, help="epoch seconds: no round is started past it")
    partial.add_argument("--json", type=Path, help="write every draw and the summary here")
    partial.add_argument("--logs", type=Path, default=Path("/tmp/bench-load-logs"), help="server logs (--native)")
    args = parser.parse_args()
    shards = sorted(args.model.glob("*.gguf")) if args.model else synthetic_model(args.gib)
    if args.partial_preread:
        partial_preread(args, shards)
        return
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
                row(
                    f"pre-read alone, {method} x{workers}, cold",
                    timed(lambda: page_cache.preread(paths, workers, lambda n: None, method)),
                )
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
    print(
        f"model: {len(shards)} shards, {total / (1 << 30):.2f} GiB ({shards[0].parent}); image {args.image}; "
        f"{args.runs} run(s), median; cache emptied with {how}"
    )
    print("| run | seconds | GiB/s | × cold floor | × cold load |")
    print("|---|---|---|---|---|")
    for name, seconds in med.items():
        print(
            f"| {name} | {seconds:.2f} | {total / (1 << 30) / seconds:.2f} | "
            f"{seconds / med['cold floor (1 reader)']:.2f} | {seconds / med['cold load']:.2f} |"
        )
    print(
        f"cold load / cold floor = {med['cold load'] / med['cold floor (1 reader)']:.2f}x   "
        f"warm / cold load = {med['warm load'] / med['cold load']:.2f}x   "
        f"pre-read reload / cold reload downtime = "
        f"{med['pre-read reload: downtime'] / med['cold reload: downtime']:.2f}x"
    )
    if "hybrid warm load" in med:
        print(f"hybrid warm / all-GPU warm = {med['hybrid warm load'] / med['warm load']:.2f}x")


if __name__ == "__main__":
    main()
