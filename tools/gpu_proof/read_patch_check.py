"""Correctness of kimik3's parallel-host-read patch (kimik3_reconciler/patches/parallel-host-read.patch) on a CPU
machine, where every tensor of the model lives in the CPU (host) buffer, so the patched read path carries all of
it. Driven by read_patch_check.sh (which builds the two servers and writes the model); not part of the test suite
(it builds llama.cpp and loads a ~1 GB model many times).

    python3 tools/gpu_proof/read_patch_check.py STOCK_BIN READ_BIN MODEL_DIR OUT_DIR

(a) tokens: the same 64 greedy tokens (temperature 0, seed 42, /completion) from the stock build, the read build,
    the read build with KIMIK3_PARALLEL_READ=0 (its stock path), and with 1 and 5 read threads;
(b) a shard cut short while the server loads (the server is stopped with SIGSTOP as soon as it prints its model
    buffer size, i.e. after the loader checked every tensor against the file sizes and before load_all_data
    reads, the last shard is truncated to half, then SIGCONT): the load must fail with an error exit (not a
    signal) and say "unexpectedly reached end of file", stock and read build alike;
    the same with a NaN written into a tensor and --check-tensors: both fail with "has invalid data" (the patch
    validates the tensors its threads read after joining them); and the read build with --check-tensors on the
    intact model gives the same tokens (in (a));
(c) warm loads (files in the page cache), stock and read alternating, the median and the ratio (not asserted).
Writes OUT_DIR/read-patch-check.json and prints the table; exits 1 when (a) or (b) fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import load_probe as lp

ROUNDS = int(os.environ.get("READ_CHECK_ROUNDS", "5"))
VERBOSE = ["-lv", "4"]  # llama's info lines (the patch's "kimik3 parallel read" line) show at verbosity 4


def _server(bindir: Path, observed, log: Path, env: dict | None = None, extra: tuple = ()) -> lp.Server:
    argv = [*lp.argv_for(observed, lp.LAYERS, "none"), *VERBOSE, *extra]
    return lp.Server(bindir, argv, log, env)


def tokens_check(bins: dict[str, Path], observed, out: Path) -> dict:
    cases = {
        "stock": ("stock", None),
        "read": ("read", None),
        "read-off": ("read", {"KIMIK3_PARALLEL_READ": "0"}),
        "read-1-thread": ("read", {"KIMIK3_PARALLEL_READ_THREADS": "1"}),
        "read-5-threads": ("read", {"KIMIK3_PARALLEL_READ_THREADS": "5"}),
        "read-check-tensors": ("read", None),
    }
    got = {}
    for name, (build, env) in cases.items():
        extra = ("--check-tensors",) if name.endswith("check-tensors") else ()
        server = _server(bins[build], observed, out / f"tokens-{name}.log", env, extra)
        try:
            load = server.start_and_wait()
            reply = server.complete(lp.TOKENS_PROMPT, 64)
            got[name] = {"tokens": reply.get("tokens"), "read": load.get("read"), "healthy_s": load["healthy_s"]}
        finally:
            server.stop()
        print(
            name,
            json.dumps({k: v for k, v in got[name].items() if k != "tokens"}),
            (got[name]["tokens"] or [])[:8],
            flush=True,
        )
    sets = {json.dumps(v["tokens"]) for v in got.values()}
    paths_ok = (
        got["stock"]["read"] is None
        and got["read-off"]["read"] is None
        and got["read"]["read"] is not None
        and got["read-1-thread"]["read"]["threads"] == 1
        and got["read-5-threads"]["read"]["threads"] == 5
    )
    return {
        "identical": len(sets) == 1 and all(v["tokens"] for v in got.values()),
        "paths_as_expected": paths_ok,
        "n_tokens": len(got["stock"]["tokens"] or []),
        "runs": got,
    }


def _copy_model(model_dir: Path, work: Path) -> tuple[Path, list[str]]:
    """A copy of the model to damage, and the server argv naming it (the argv names the first shard)."""
    copy = work / "damaged" / model_dir.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    copy.mkdir(parents=True)
    for f in lp.shards(model_dir):
        shutil.copyfile(f, copy / f.name)
    argv = [*lp.argv_for(lp.observe(copy), lp.LAYERS, "none"), *VERBOSE]
    return copy, [str(copy / Path(a).name) if a.endswith(".gguf") else a for a in argv]


def invalid_data_check(bindir: Path, model_dir: Path, out: Path, name: str) -> dict:
    """A NaN in one F32 tensor of the last shard, --check-tensors: the load must fail naming the tensor."""
    from gguf import GGUFReader

    copy, argv = _copy_model(model_dir, out)
    last = lp.shards(copy)[-1]
    tensor = next(t for t in GGUFReader(str(last)).tensors if t.tensor_type.name == "F32" and t.n_bytes >= 4096)
    with open(last, "r+b") as f:
        f.seek(int(tensor.data_offset) + int(tensor.n_bytes) // 2 // 4 * 4)
        f.write(struct.pack("<4f", *([float("nan")] * 4)))
    log = out / f"invalid-{name}.log"
    try:
        with open(log, "w") as f:
            done = subprocess.run(
                [str(bindir / "llama-server"), *argv, "--check-tensors"],
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LD_LIBRARY_PATH": str(bindir)},
                cwd=bindir,
                timeout=120,
                check=False,
            )
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    text = log.read_text(errors="replace")
    wanted = f"tensor '{tensor.name}' has invalid data"
    return {
        "ok": done.returncode > 0 and wanted in text,
        "rc": done.returncode,
        "tensor": tensor.name,
        "error_lines": [line for line in text.splitlines() if "invalid data" in line][:4],
    }


def truncated_check(bindir: Path, model_dir: Path, out: Path, name: str, env: dict | None = None) -> dict:
    """Load a copy of the model whose last shard is cut to half after the loader opened and checked it."""
    copy, argv = _copy_model(model_dir, out)
    last = lp.shards(copy)[-1]
    log = out / f"truncated-{name}.log"
    envs = {**os.environ, "LD_LIBRARY_PATH": str(bindir), **(env or {})}
    with open(log, "w") as f:
        process = subprocess.Popen(
            [str(bindir / "llama-server"), *argv], stdout=f, stderr=subprocess.STDOUT, env=envs, cwd=bindir
        )
    stopped_at = None
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if "model buffer size" in log.read_text(errors="replace"):
                process.send_signal(signal.SIGSTOP)
                stopped_at = round(time.monotonic(), 3)
                break
            time.sleep(0.002)
        with open(last, "r+b") as f:
            f.truncate(last.stat().st_size // 2)
        if stopped_at is not None:
            process.send_signal(signal.SIGCONT)
        try:
            rc = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = None  # it went on (healthy with a short file?): a failure of this check
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(copy.parent, ignore_errors=True)
    text = log.read_text(errors="replace")
    errors = [line for line in text.splitlines() if "error loading model" in line]
    ok = (
        stopped_at is not None
        and rc is not None
        and rc > 0  # an error exit, not a signal (crash)
        and "unexpectedly reached end of file" in text
    )
    return {"ok": ok, "rc": rc, "stopped_before_read": stopped_at is not None, "error_lines": errors[:6]}


def warm_loads(bins: dict[str, Path], observed, files: list[Path], out: Path) -> dict:
    samples: dict[str, list[float]] = {"stock": [], "read": []}
    reads = []
    for r in range(ROUNDS):
        for build in ("stock", "read"):
            if lp.cached_share(files) < 0.99:
                lp.preread(files)
            server = _server(bins[build], observed, out / f"warm-{build}-{r}.log")
            try:
                load = server.start_and_wait()
            finally:
                server.stop()
            samples[build].append(load["healthy_s"])
            if load.get("read"):
                reads.append(load["read"])
    med = {k: round(statistics.median(v), 3) for k, v in samples.items()}
    return {
        "samples": samples,
        "median_s": med,
        "ratio_read_over_stock": round(med["read"] / med["stock"], 3),
        "read_lines": reads,
    }


def main() -> None:
    stock, read, model_dir, out = (Path(a) for a in sys.argv[1:5])
    out.mkdir(parents=True, exist_ok=True)
    bins = {"stock": stock, "read": read}
    files = lp.shards(model_dir)
    observed = lp.observe(model_dir)
    lp.preread(files)
    result = {
        "model": {"files": [f.name for f in files], "bytes": sum(f.stat().st_size for f in files)},
        "nproc": os.cpu_count(),
    }
    result["tokens"] = tokens_check(bins, observed, out)
    result["truncated"] = {
        "stock": truncated_check(stock, model_dir, out, "stock"),
        "read": truncated_check(read, model_dir, out, "read"),
    }
    result["invalid"] = {
        "stock": invalid_data_check(stock, model_dir, out, "stock"),
        "read": invalid_data_check(read, model_dir, out, "read"),
    }
    result["warm"] = warm_loads(bins, observed, files, out)
    (out / "read-patch-check.json").write_text(json.dumps(result, indent=1))
    t, w = result["tokens"], result["warm"]
    print(
        f"\n(a) 64 greedy tokens identical over {', '.join(t['runs'])}: {t['identical']} "
        f"(read path taken exactly where expected: {t['paths_as_expected']})"
    )
    for name, r in result["truncated"].items():
        print(
            f"(b) last shard cut to half during the load, {name}: clean failure {r['ok']} (exit {r['rc']}): "
            f"{r['error_lines'][-1] if r['error_lines'] else '-'}"
        )
    for name, r in result["invalid"].items():
        print(
            f"(b) a NaN in {r['tensor']}, --check-tensors, {name}: clean failure {r['ok']} (exit {r['rc']}): "
            f"{r['error_lines'][0] if r['error_lines'] else '-'}"
        )
    print(
        f"(c) warm load, {ROUNDS} a side alternating, model {result['model']['bytes'] / 1e9:.2f} GB, "
        f"{result['nproc']} cores:"
    )
    print("| build | median s | samples |\n|---|---|---|")
    for build in ("stock", "read"):
        print(f"| {build} | {w['median_s'][build]} | {', '.join(str(s) for s in w['samples'][build])} |")
    print(f"| read / stock | {w['ratio_read_over_stock']} | |")
    if w["read_lines"]:
        print(
            "read patch's own line (median s):",
            statistics.median(x["s"] for x in w["read_lines"]),
            "threads",
            w["read_lines"][0]["threads"],
            "GB/s",
            statistics.median(x["gbps"] for x in w["read_lines"]),
        )
    ok = (
        t["identical"]
        and t["paths_as_expected"]
        and all(r["ok"] for r in result["truncated"].values())
        and all(r["ok"] for r in result["invalid"].values())
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
