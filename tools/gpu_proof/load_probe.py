"""Load-time proof on the GPU host (issue 15): the stock llama.cpp build against the one with kimik3's
parallel-pin patch (kimik3_reconciler/patches/parallel-pinned-host-buffer.patch), every server started with
the argv kimik3 renders (planning/launch.py) for a hybrid and an all-GPU profile of one synthetic model.

    python3 tools/gpu_proof/load_probe.py cmake-args > rendered.json
    python3 tools/gpu_proof/load_probe.py write-model DIR
    python3 tools/gpu_proof/load_probe.py measure1|measure2|table STOCK_BIN PATCHED_BIN MODEL_DIR OUT_DIR
    python3 tools/gpu_proof/load_probe.py measure3 STOCK_BIN PATCHED_BIN MODEL_DIR OUT_DIR READ_BIN

measure1: warm loads (files in the page cache), interleaved rounds of all-GPU stock, hybrid stock, hybrid
patched, all-GPU patched, hybrid patched without MADV_HUGEPAGE; after each hybrid load the same 64-token
greedy completion (seed fixed, token ids kept) and one timed completion (server `timings`: prompt and decode
tok/s). measure2 (patched build): serve.load_mode none vs dio, cold (page cache dropped before each) and warm;
then reloads: the running server stays up while kimik3's own pre-read (adapters/page_cache.py, the workers of
the PagecachePreread step) reads the shards, then stop and start (downtime: stop -> /health 200), against the
same after a cache drop. Every load is one JSON line in OUT_DIR/samples.jsonl (kept across calls); `table`
writes OUT_DIR/load-h200.json (every sample, the ratios and what they are computed from) and prints the table.
Per load: seconds to /health 200, the first bulk read (the server's /proc/<pid>/io rchar past 64 MiB), RSS
and CPU seconds at that moment, the patch's own log line (fault and cudaHostRegister seconds).

measure3 (the parallel-host-read patch, kimik3_reconciler/patches/parallel-host-read.patch): READ_BIN is the
pin-patched build with the read patch on top (run-load.sh measure3 builds it). Warm hybrid loads alternating
pin-only (PATCHED_BIN) and read, with the 64 greedy tokens after each (round 0 also the read build with
KIMIK3_PARALLEL_READ=0); then reloads, pre-read vs cold, for both builds, alternating. Its rows (kinds
read-warm-load, read-reload) join samples.jsonl, and `table` adds their ratios when they are there.

LOAD_PROBE_DRY=1 (a CPU dev machine): the same code path with a CPU build (`-ngl` is ignored there); the page
cache is emptied per file (posix_fadvise) when drop_caches is not writable. CALL_LIMIT_AT (epoch seconds)
ends a phase before the device call's limit; a round that would not fit is left out, and said.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from native_runner import stop_process

from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.adapters.page_cache import resident_bytes
from kimik3_reconciler.engines.llamacpp.build_flags import cmake_configure_args
from kimik3_reconciler.engines.llamacpp.gguf_header import parse_gguf_header, summarize
from kimik3_reconciler.model.facts import LocalInputs, ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import PagecachePreread
from kimik3_reconciler.observe.host import collect_host
from kimik3_reconciler.planning.launch import render_launch

HERE = Path(__file__).resolve().parent
REV = "d3e0c0de" * 5
QUANT = "UD-LOAD"
LAYERS = 24
PORT = int(os.environ.get("LOAD_PROBE_PORT", "18720"))  # a dry run beside other servers picks its own
DRY = os.environ.get("LOAD_PROBE_DRY") == "1"
BULK = 64 << 20  # rchar past this: the server reads the model (libraries and headers are far smaller)
PATCH_LINE = re.compile(
    r"kimik3_parallel_pin_malloc: pinned ([\d.]+) MiB: (\d+) threads faulted its pages in "
    r"([\d.]+) s, cudaHostRegister ([\d.]+) s"
)
READ_LINE = re.compile(
    r"kimik3 parallel read: (\d+) host tensors, ([\d.]+) MiB in (\d+) threads \+ the loader's, "
    r"([\d.]+) s \(([\d.]+) GB/s\)"
)
HOST_BUFFER = re.compile(r"CUDA_Host model buffer size = +([\d.]+) MiB")
TOKENS_PROMPT = "The reconciler observes the host, plans each step and"
# byte-level vocabulary: one token per character; a dry run on 2 CPU cores shortens both
PERF_PROMPT = ("kimik3 renders one profile into a plan; " * 40)[
    : int(os.environ.get("LOAD_PROBE_PROMPT_CHARS", "1000"))
]
N_PREDICT = int(os.environ.get("LOAD_PROBE_N_PREDICT", "64"))


def profile_text(n_cpu_moe: int, load_mode: str) -> str:
    return f"""apiVersion: kimik3/v1
name: k3-load-proof
model:
  repo: kimik3-demo/Kimi-K3-tiny-GGUF
  revision: {REV}
  quant: {QUANT}
  cache_dir: /models-cache
build: {{source: mainline, variant: cuda, cuda_architectures: ["90"], cpu_features: auto}}
gpus: [0]
serve:
  host: loopback
  port: {PORT}
  ctx_size: 4096
  parallel: 1
  n_cpu_moe: {n_cpu_moe}
  load_mode: {load_mode}
gate:
  smoke: false
"""


class NoDocker:
    def info(self) -> dict:
        return {"Runtimes": {"nvidia": {}}}


def shards(model_dir: Path) -> list[Path]:
    return sorted(model_dir.glob("*.gguf"))


def observe(model_dir: Path) -> Observed:
    files = shards(model_dir)
    with open(files[0], "rb") as f:
        layout = summarize([parse_gguf_header(f.read(8 << 20))])
    remote = tuple(RemoteFile(path=f"{QUANT}/{p.name}", size=p.stat().st_size) for p in files)
    return Observed(
        host=collect_host(LinuxHost(), NoDocker()),
        layout=layout,
        inputs=LocalInputs(dockerfile_path="-", dockerfile_sha256="-"),
        model=ModelFact(
            repo="kimik3-demo/Kimi-K3-tiny-GGUF", revision=REV, quant=QUANT, cache_dir="/models-cache", files=remote
        ),
    )


def argv_for(observed: Observed, n_cpu_moe: int, load_mode: str) -> list[str]:
    loaded = parse_profile(profile_text(n_cpu_moe, load_mode), source="k3-load-proof.yaml")
    argv = list(render_launch(loaded.profile, observed, "native", "native").spec.command)
    mount = os.environ.get("LOAD_PROBE_MOUNT")  # a dry run: the cache folder that stands for /models
    return [mount + a[len("/models") :] if mount and a.startswith("/models/") else a for a in argv]


# --- the server process ---------------------------------------------------------------------------------------


def _proc_number(pid: int, file: str, key: str) -> int | None:
    """The first number of the `key` line of /proc/PID/FILE (None when the process or the line is gone)."""
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _proc_io(pid: int) -> int | None:
    return _proc_number(pid, "io", "rchar:")


def _rss(pid: int) -> int | None:
    kib = _proc_number(pid, "status", "VmRSS:")
    return None if kib is None else kib * 1024


def _cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/health", timeout=1).status == 200
    except Exception:  # noqa: BLE001 - refused, 503 while loading: not yet
        return False


def _fields(match: re.Match | None, **kinds: Callable[[str], float]) -> dict | None:
    """A log line's groups by name, in order, each read as its kind (None when the line was not logged)."""
    return None if match is None else {name: kind(match.group(i + 1)) for i, (name, kind) in enumerate(kinds.items())}


def _mapped(pid: int, wanted: Callable[[str], bool]) -> str | None:
    """The first file the process mapped whose path is `wanted` (None when none is, or the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if wanted(path):
                return path
    except OSError:
        return None
    return None


def _libllama(pid: int) -> str | None:
    """Which libllama the process mapped (the read patch changes it; None for a static build)."""
    return _mapped(pid, lambda path: "/libllama" in path)


def _ggml_cuda_lib(pid: int) -> str | None:
    """Which libggml-cuda (or libggml-cpu in a dry run) the process mapped: stock and patched share names."""
    return _mapped(pid, lambda path: "libggml-cuda" in path or (DRY and "libggml-cpu" in path))


class Server:
    def __init__(
        self, bindir: Path, argv: list[str], log: Path, env: dict[str, str] | None = None, deadline: float | None = None
    ):
        self.bindir, self.argv, self.log, self.deadline = bindir, argv, log, deadline
        self.env = {**os.environ, "LD_LIBRARY_PATH": str(bindir), **(env or {})}
        self.process: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{PORT}"

    def budget_s(self, most: float) -> float:
        """At most `most` seconds, and never past the call's deadline (less 20 s to stop and copy out)."""
        return max(5.0, min(most, self.deadline - time.time() - 20)) if self.deadline else most

    def start_and_wait(self, timeout_s: float = 240.0) -> dict:
        """Start, sample /proc every 0.1 s until /health is 200; the load's record."""
        timeout_s = self.budget_s(timeout_s)
        t0 = time.monotonic()
        with open(self.log, "w") as out:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                [str(self.bindir / "llama-server"), *self.argv],
                cwd=self.bindir,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        pid = self.process.pid
        rchar0, first, lib, libllama, peak_rss, last_rchar = None, None, None, None, 0, 0
        while True:
            now = time.monotonic() - t0
            rchar, rss = _proc_io(pid), _rss(pid)
            if rchar is not None:
                rchar0 = rchar if rchar0 is None else rchar0
                last_rchar = rchar
                if first is None and rchar - rchar0 >= BULK:
                    first = {"s": round(now, 2), "rss": rss, "cpu_s": _cpu_s(pid)}
            peak_rss = max(peak_rss, rss or 0)
            lib = lib or _ggml_cuda_lib(pid)
            libllama = libllama or _libllama(pid)
            if _healthy(self.url):
                break
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited {self.process.returncode} while loading; log {self.log}:\n"
                    + self.log.read_text()[-3000:]
                )
            if now > timeout_s:
                self.stop()
                raise RuntimeError(f"llama-server not healthy after {timeout_s:.0f} s; log {self.log}")
            time.sleep(0.1)
        healthy = time.monotonic() - t0
        text = self.log.read_text(errors="replace")
        pin = PATCH_LINE.search(text)
        host = HOST_BUFFER.search(text)
        read = READ_LINE.search(text)
        return {
            "healthy_s": round(healthy, 3),
            "first_read_s": first["s"] if first else None,
            "rss_at_first_read": first["rss"] if first else None,
            "cpu_s_at_first_read": first["cpu_s"] if first else None,
            "peak_rss": peak_rss,
            "rchar": last_rchar - (rchar0 or 0),
            "cpu_s": _cpu_s(pid),
            "lib": lib,
            "host_buffer_mib": float(host.group(1)) if host else None,
            "pin": _fields(pin, mib=float, threads=int, fault_s=float, register_s=float),
            "libllama": libllama,
            "read": _fields(read, tensors=int, mib=float, threads=int, s=float, gbps=float),
        }

    def complete(self, prompt: str, n_predict: int) -> dict:
        body = {
            "prompt": prompt,
            "n_predict": n_predict,
            "temperature": 0,
            "seed": 42,
            "ignore_eos": True,
            "cache_prompt": False,
            "return_tokens": True,
        }
        request = urllib.request.Request(
            f"{self.url}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        return json.loads(urllib.request.urlopen(request, timeout=self.budget_s(300)).read())

    def stop(self) -> float:
        if self.process is None or self.process.poll() is not None:
            return 0.0
        t0 = time.monotonic()
        stop_process(self.process, 60)
        return round(time.monotonic() - t0, 3)


# --- the page cache -------------------------------------------------------------------------------------------


def drop_cache(files: list[Path]) -> str:
    """Empty the page cache of the model: drop_caches (root on the GPU host), else per file (dev machine)."""
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        how = "drop_caches"
    except OSError:
        from kimik3_reconciler.adapters.page_cache import evict

        for f in files:
            evict(str(f))
        how = "fadvise"
    return how


def cached_share(files: list[Path]) -> float:
    total = sum(f.stat().st_size for f in files)
    return round(sum(resident_bytes(str(f)) for f in files) / total, 3) if total else 0.0


def preread(files: list[Path]) -> dict:
    """kimik3's own pre-read: the PagecachePreread step's workers, through the host adapter."""
    spec = PagecachePreread(files=tuple(str(f) for f in files), total_bytes=sum(f.stat().st_size for f in files))
    t0 = time.monotonic()
    LinuxHost().preread(list(spec.files), spec.workers, lambda n: None)
    return {"preread_s": round(time.monotonic() - t0, 3), "workers": spec.workers}


# --- phases ---------------------------------------------------------------------------------------------------


class Phase:
    def __init__(self, stock: Path, patched: Path, model_dir: Path, out: Path, name: str, read: Path | None = None):
        self.bins = {"stock": stock, "patched": patched, **({"read": read} if read else {})}
        self.files = shards(model_dir)
        self.out, self.name = out, name
        self.observed = observe(model_dir)
        self.layers = LAYERS if not self.observed.layout else (self.observed.layout.n_layer or LAYERS)
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.deadline = float(os.environ.get("CALL_LIMIT_AT", "0")) or None
        self.count = len(list(self.logs.glob("*.log")))

    def left_s(self) -> float:
        return self.deadline - time.time() if self.deadline else 1e9

    def record(self, row: dict) -> None:
        row = {"phase": self.name, "at": time.strftime("%H:%M:%S"), **row}
        with open(self.out / "samples.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        brief = {
            k: row.get(k)
            for k in (
                "kind",
                "config",
                "build",
                "load_mode",
                "cache",
                "round",
                "healthy_s",
                "first_read_s",
                "downtime_s",
                "decode_tps",
                "prompt_tps",
            )
        }
        print(json.dumps({k: v for k, v in brief.items() if v is not None}), "pin:", row.get("pin"), flush=True)

    def server(self, build: str, n_cpu_moe: int, load_mode: str = "none", env: dict | None = None) -> Server:
        self.count += 1
        argv = argv_for(self.observed, n_cpu_moe, load_mode)
        return Server(
            self.bins[build], argv, self.logs / f"{self.count:03d}-{self.name}-{build}.log", env, self.deadline
        )

    def config(self, name: str) -> tuple[str, int, dict]:
        build, placement = name.split("-")[1], name.split("-")[0]
        env = {"KIMIK3_PARALLEL_PIN_HUGEPAGE": "0"} if name.endswith("nohuge") else {}
        return build, (self.layers if placement == "hybrid" else 0), env


CONFIGS_1 = ("gpu-stock", "hybrid-stock", "hybrid-patched", "gpu-patched", "hybrid-patched-nohuge")


def sample(phase: Phase, server: Server, row: dict, probe: Callable[[Server], dict] | None = None) -> None:
    """One load sample: start the server and wait for it (the load's figures), then `probe` it while it serves;
    a failure is the sample's `error`, the server is stopped either way, and the row is always recorded."""
    try:
        row.update(server.start_and_wait())
        if probe is not None:
            row.update(probe(server))
    except Exception as exc:  # noqa: BLE001 - one failed load is a recorded sample, the phase goes on
        row["error"] = str(exc)[-2000:]
    finally:
        row["stop_s"] = server.stop()
    phase.record(row)


def generated_tokens(server: Server) -> dict:
    """The greedy tokens of the fixed prompt: the builds' correctness check."""
    tokens = server.complete(TOKENS_PROMPT, N_PREDICT)
    return {"tokens": tokens.get("tokens"), "content": tokens.get("content")}


def tokens_and_speeds(server: Server) -> dict:
    """The tokens, then prompt and decode speed from llama-server's own timings of a second request."""
    timings = server.complete(PERF_PROMPT, N_PREDICT).get("timings", {})
    return {
        **generated_tokens(server),
        "prompt_tokens": timings.get("prompt_n"),
        "prompt_tps": timings.get("prompt_per_second"),
        "decode_tokens": timings.get("predicted_n"),
        "decode_tps": timings.get("predicted_per_second"),
    }


def warm_row(phase: Phase, server: Server, kind: str, name: str, build: str, n_cpu_moe: int, r: int) -> dict:
    """A warm load's sample row before its figures: the config (`name`, its build and layers on the CPU), round
    `r`, and the share of the model's pages cached just before it."""
    return {
        "kind": kind,
        "config": name,
        "build": build,
        "n_cpu_moe": n_cpu_moe,
        "load_mode": "none",
        "cache": "warm",
        "round": r,
        "cached_before": cached_share(phase.files),
        "argv": server.argv,
    }


def measure1(phase: Phase, rounds: int) -> None:
    preread(phase.files)  # warm: every load below reads from the page cache
    for r in range(rounds):
        started = time.monotonic()
        for name in CONFIGS_1:
            if phase.left_s() < 40:
                print(f"measure1: out of time in round {r} before {name}", flush=True)
                return
            build, n_cpu_moe, env = phase.config(name)
            server = phase.server(build, n_cpu_moe, "none", env)
            sample(phase, server, warm_row(phase, server, "warm-load", name, build, n_cpu_moe, r), tokens_and_speeds)
        if phase.left_s() < 1.5 * (time.monotonic() - started) + 20:
            print(f"measure1: stopping after round {r}: {phase.left_s():.0f} s left in the call", flush=True)
            return


def reload_row(phase: Phase, kind: str, build: str, n_cpu_moe: int, how: str, r: int) -> dict:
    """A reload's sample row before its figures, the model's pages dropped from the cache first (then `how`,
    preread or cold, says what the reload finds): the hybrid config of `build`, round `r`."""
    dropped = drop_cache(phase.files)
    return {
        "kind": kind,
        "config": f"hybrid-{build}",
        "build": build,
        "n_cpu_moe": n_cpu_moe,
        "load_mode": "none",
        "cache": how,
        "dropped_by": dropped,
        "round": r,
    }


def measure2(phase: Phase, rounds: int) -> None:
    hybrid = phase.layers
    # serve.load_mode none vs dio, cold and warm, hybrid (the deployment's shape), then all-GPU if time is left
    for n_cpu_moe, label in ((hybrid, "hybrid"), (0, "gpu")):
        for r in range(rounds):
            started = time.monotonic()
            for cache in ("cold", "warm"):
                for mode in ("none", "dio"):
                    if phase.left_s() < 45:
                        print(f"measure2: out of time before {label} {cache} {mode}", flush=True)
                        return
                    how = drop_cache(phase.files) if cache == "cold" else None
                    if cache == "warm" and cached_share(phase.files) < 0.99:
                        preread(phase.files)
                    before = cached_share(phase.files)
                    server = phase.server("patched", n_cpu_moe, mode)
                    row = {
                        "kind": "load-mode",
                        "config": f"{label}-patched",
                        "build": "patched",
                        "n_cpu_moe": n_cpu_moe,
                        "load_mode": mode,
                        "cache": cache,
                        "dropped_by": how,
                        "round": r,
                        "cached_before": before,
                    }
                    sample(phase, server, row)
            if phase.left_s() < 2.5 * (time.monotonic() - started) + 30:
                print(f"measure2: load modes stop after {label} round {r}: {phase.left_s():.0f} s left", flush=True)
                break
        if label == "hybrid" and phase.left_s() > 90:
            reloads(phase, rounds)
        elif label == "hybrid":
            print(f"measure2: no reloads: {phase.left_s():.0f} s left", flush=True)
        if phase.left_s() < 120:
            print(f"measure2: no all-GPU load-mode rounds: {phase.left_s():.0f} s left", flush=True)
            return


def swap(phase: Phase, old: Server, row: dict, make: Callable[[], Server]) -> Server:
    """One reload sample: pre-read when row["cache"] says so (the old server serves meanwhile), stop the old
    server, start `make()`'s, record the downtime; returns the server that now runs (a fresh one after a failure)."""
    if row["cache"] == "preread":
        row.update(preread(phase.files))
    row["cached_before"] = cached_share(phase.files)
    t0 = time.monotonic()
    row["stop_s"] = old.stop()
    new = make()
    try:
        row.update(new.start_and_wait())
        row["downtime_s"] = round(time.monotonic() - t0, 3)
    except Exception as exc:  # noqa: BLE001 - recorded; the next round starts from a fresh server
        row["error"] = str(exc)[-2000:]
        new.stop()
        new = make()
        new.start_and_wait()
    phase.record(row)
    return new


def reloads(phase: Phase, rounds: int) -> None:
    """A running server (hybrid, patched) is replaced by the same argv: pre-read first vs a cold cache."""
    hybrid = phase.layers
    old = phase.server("patched", hybrid)
    try:
        old.start_and_wait()
        for r in range(rounds):
            started = time.monotonic()
            for how in ("preread", "cold"):
                if phase.left_s() < 60:
                    print(f"measure2: out of time before the {how} reload of round {r}", flush=True)
                    return  # the finally below stops the server
                row = reload_row(phase, "reload", "patched", hybrid, how, r)
                old = swap(phase, old, row, lambda: phase.server("patched", hybrid))
            if phase.left_s() < 1.5 * (time.monotonic() - started) + 60:
                print(f"measure2: reloads stop after round {r}: {phase.left_s():.0f} s left", flush=True)
                break
    except Exception as exc:  # noqa: BLE001 - recorded, the table says what is missing
        phase.record(
            {"kind": "reload-error", "config": "hybrid-patched", "build": "patched", "error": str(exc)[-2000:]}
        )
    finally:
        old.stop()


# measure3: the read patch. "read-off" is the read build with KIMIK3_PARALLEL_READ=0 (the stock read path in
# the same binary: its tokens must match too); one sample, in round 0, as a correctness check.
CONFIGS_3 = ("hybrid-patched", "hybrid-read")
READ_OFF = {"KIMIK3_PARALLEL_READ": "0"}
# llama-server prints llama's info lines (the read patch's, the pin patch's) only at verbosity 4: every measure3
# server gets it, both builds alike
VERBOSE = ["-lv", "4"]


def server3(phase: Phase, build: str, n_cpu_moe: int, env: dict | None = None) -> Server:
    server = phase.server(build, n_cpu_moe, "none", env)
    server.argv = [*server.argv, *VERBOSE]
    return server


def measure3(phase: Phase, rounds: int) -> None:
    hybrid = phase.layers
    preread(phase.files)  # warm: every load below reads from the page cache
    for r in range(rounds):
        started = time.monotonic()
        for name in CONFIGS_3 + (("hybrid-readoff",) if r == 0 else ()):
            if phase.left_s() < 40:
                print(f"measure3: out of time in round {r} before {name}", flush=True)
                return
            build = "read" if name.startswith("hybrid-read") else "patched"
            if cached_share(phase.files) < 0.99:
                preread(phase.files)
            server = server3(phase, build, hybrid, READ_OFF if name == "hybrid-readoff" else None)
            row = warm_row(phase, server, "read-warm-load", name, build, hybrid, r)
            sample(phase, server, row, generated_tokens)
        # the reloads need about as long again per round: keep half of what is left for them
        if phase.left_s() < 3 * (time.monotonic() - started) + 60:
            print(f"measure3: warm loads stop after round {r}: {phase.left_s():.0f} s left", flush=True)
            break
    read_reloads(phase, rounds)


def read_reloads(phase: Phase, rounds: int) -> None:
    """A running server is replaced: pre-read vs cold, pin-only vs read build, alternating within each round."""
    hybrid = phase.layers
    old = server3(phase, "read", hybrid)
    try:
        old.start_and_wait()
        for r in range(rounds):
            started = time.monotonic()
            for build, how in (("read", "preread"), ("patched", "preread"), ("read", "cold"), ("patched", "cold")):
                if phase.left_s() < 60:
                    print(f"measure3: out of time before the {build} {how} reload of round {r}", flush=True)
                    return  # the finally below stops the server
                row = reload_row(phase, "read-reload", build, hybrid, how, r)
                old = swap(phase, old, row, lambda b=build: server3(phase, b, hybrid))
            if phase.left_s() < 1.3 * (time.monotonic() - started) + 30:
                print(f"measure3: reloads stop after round {r}: {phase.left_s():.0f} s left", flush=True)
                break
    except Exception as exc:  # noqa: BLE001 - recorded, the table says what is missing
        phase.record({"kind": "read-reload-error", "config": "hybrid-read", "build": "read", "error": str(exc)[-2000:]})
    finally:
        old.stop()


# --- the table ------------------------------------------------------------------------------------------------


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def summarize_samples(rows: list[dict]) -> dict:
    """Medians per (kind, config, load_mode, cache) and the ratios of the issue, each naming its two groups."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        key = f"{row['kind']}/{row['config']}/{row.get('load_mode', 'none')}/{row.get('cache', 'warm')}"
        groups.setdefault(key, []).append(row)
    medians = {
        key: {
            "n": len(g),
            "healthy_s": _median(g, "healthy_s"),
            "first_read_s": _median(g, "first_read_s"),
            "downtime_s": _median(g, "downtime_s"),
            "decode_tps": _median(g, "decode_tps"),
            "prompt_tps": _median(g, "prompt_tps"),
            "preread_s": _median(g, "preread_s"),
            "fault_s": _median([r["pin"] for r in g if r.get("pin")], "fault_s"),
            "register_s": _median([r["pin"] for r in g if r.get("pin")], "register_s"),
        }
        for key, g in sorted(groups.items())
    }

    def ratio(name: str, num: str, den: str, field: str) -> dict:
        a, b = medians.get(num, {}).get(field), medians.get(den, {}).get(field)
        return {
            "name": name,
            "numerator": num,
            "denominator": den,
            "field": field,
            "value": round(a / b, 3) if a and b else None,
        }

    w = "warm-load/{}/none/warm"
    ratios = [
        ratio("hybrid / all-GPU load, stock", w.format("hybrid-stock"), w.format("gpu-stock"), "healthy_s"),
        ratio("hybrid / all-GPU load, patched", w.format("hybrid-patched"), w.format("gpu-patched"), "healthy_s"),
        ratio("hybrid load patched / stock", w.format("hybrid-patched"), w.format("hybrid-stock"), "healthy_s"),
        ratio(
            "hybrid patched without MADV_HUGEPAGE / with",
            w.format("hybrid-patched-nohuge"),
            w.format("hybrid-patched"),
            "healthy_s",
        ),
        ratio("all-GPU load patched / stock", w.format("gpu-patched"), w.format("gpu-stock"), "healthy_s"),
        ratio(
            "hybrid decode tok/s patched / stock", w.format("hybrid-patched"), w.format("hybrid-stock"), "decode_tps"
        ),
        ratio(
            "hybrid prompt tok/s patched / stock", w.format("hybrid-patched"), w.format("hybrid-stock"), "prompt_tps"
        ),
        ratio(
            "hybrid load dio / none, cold",
            "load-mode/hybrid-patched/dio/cold",
            "load-mode/hybrid-patched/none/cold",
            "healthy_s",
        ),
        ratio(
            "hybrid load dio / none, warm",
            "load-mode/hybrid-patched/dio/warm",
            "load-mode/hybrid-patched/none/warm",
            "healthy_s",
        ),
        ratio(
            "all-GPU load dio / none, cold",
            "load-mode/gpu-patched/dio/cold",
            "load-mode/gpu-patched/none/cold",
            "healthy_s",
        ),
        ratio(
            "all-GPU load dio / none, warm",
            "load-mode/gpu-patched/dio/warm",
            "load-mode/gpu-patched/none/warm",
            "healthy_s",
        ),
        ratio(
            "pre-read reload / cold reload (downtime)",
            "reload/hybrid-patched/none/preread",
            "reload/hybrid-patched/none/cold",
            "downtime_s",
        ),
    ]
    hybrid = [r for r in rows if r["kind"] == "warm-load" and r["config"].startswith("hybrid") and r.get("tokens")]
    token_sets = {json.dumps(r["tokens"]) for r in hybrid}
    checks = {
        "tokens_identical": len(token_sets) == 1 and len(hybrid) >= 2,
        "token_samples": {c: sum(1 for r in hybrid if r["config"] == c) for c in sorted({r["config"] for r in hybrid})},
        "tokens": hybrid[0]["tokens"] if hybrid else None,
        "patch_logged_only_by_patched": all(
            (r.get("pin") is not None) == (r["build"] in ("patched", "read"))
            for r in rows
            if r.get("n_cpu_moe") and r.get("healthy_s") and not DRY
        ),
        "libs": sorted({f"{r['build']}: {r.get('lib')}" for r in rows}),
    }
    if any(r["kind"].startswith("read-") for r in rows):  # measure3 ran: the read patch's ratios and checks
        m3 = "read-warm-load/{}/none/warm"
        reload3 = "read-reload/{}/none/{}"
        ratios += [
            ratio(
                "hybrid warm load read-patch / pin-only",
                m3.format("hybrid-read"),
                m3.format("hybrid-patched"),
                "healthy_s",
            ),
        ]
        reloads = (  # (name, numerator's config and cache, denominator's): the reloads' downtimes
            ("pre-read reload / cold reload, read patch", ("hybrid-read", "preread"), ("hybrid-read", "cold")),
            (
                "pre-read reload / cold reload, pin-only (measure3)",
                ("hybrid-patched", "preread"),
                ("hybrid-patched", "cold"),
            ),
            (
                "pre-read reload downtime read-patch / pin-only",
                ("hybrid-read", "preread"),
                ("hybrid-patched", "preread"),
            ),
            ("cold reload downtime read-patch / pin-only", ("hybrid-read", "cold"), ("hybrid-patched", "cold")),
        )
        ratios += [ratio(name, reload3.format(*num), reload3.format(*den), "downtime_s") for name, num, den in reloads]
        warm3 = [r for r in rows if r["kind"] == "read-warm-load" and r.get("tokens")]
        read_rows = [r for r in rows if r["kind"].startswith("read-") and r.get("healthy_s")]
        checks["read_patch"] = {
            "tokens_identical": len({json.dumps(r["tokens"]) for r in warm3}) == 1 and len(warm3) >= 2,
            "token_samples": {
                c: sum(1 for r in warm3 if r["config"] == c) for c in sorted({r["config"] for r in warm3})
            },
            # the patch's log line (seen only when the server's verbosity shows it) never where the patch is off
            "read_line_where_off": [
                r["config"]
                for r in read_rows
                if r.get("read") and (r["build"] != "read" or r["config"] == "hybrid-readoff")
            ],
            "read_lines_seen": sum(1 for r in read_rows if r.get("read")),
            "read_lines": [r["read"] for r in read_rows if r.get("read")][:12],
            "libllama": sorted({f"{r['build']}: {r.get('libllama')}" for r in read_rows}),
        }
    return {"medians": medians, "ratios": ratios, "checks": checks}


def table(out: Path) -> None:
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    summary = summarize_samples(rows)
    host = {"nproc": os.cpu_count(), "dry_run": DRY}
    for name in ("enabled", "defrag"):
        p = Path(f"/sys/kernel/mm/transparent_hugepage/{name}")
        host[f"thp_{name}"] = p.read_text().strip() if p.exists() else None
    model = {
        "files": [f.name for f in shards(Path(sys.argv[4]))] if len(sys.argv) > 4 else None,
        "bytes": sum(f.stat().st_size for f in shards(Path(sys.argv[4]))) if len(sys.argv) > 4 else None,
    }
    (out / "load-h200.json").write_text(
        json.dumps({"host": host, "model": model, **summary, "samples": rows}, indent=1)
    )
    print(
        f"{'group':<46} {'n':>2} {'load s':>8} {'1st read':>8} {'downtime':>8} {'decode':>8} {'prompt':>8} "
        f"{'fault s':>7} {'reg s':>6}"
    )
    for key, m in summary["medians"].items():
        cells = [
            m[k]
            for k in ("healthy_s", "first_read_s", "downtime_s", "decode_tps", "prompt_tps", "fault_s", "register_s")
        ]
        print(f"{key:<46} {m['n']:>2} " + " ".join(f"{'-' if c is None else c:>8}" for c in cells))
    for r in summary["ratios"]:
        print(f"{r['name']:<46} {'-' if r['value'] is None else r['value']}")
    print(
        json.dumps(summary["checks"]["token_samples"]),
        "tokens identical:",
        summary["checks"]["tokens_identical"],
        "| patch log only in patched:",
        summary["checks"]["patch_logged_only_by_patched"],
    )
    if "read_patch" in summary["checks"]:
        read = summary["checks"]["read_patch"]
        print(
            "read patch:",
            json.dumps(read["token_samples"]),
            "tokens identical:",
            read["tokens_identical"],
            "| read log lines:",
            read["read_lines_seen"],
            "where off:",
            read["read_line_where_off"],
            "|",
            read["read_lines"][:2],
        )


def write_model(out_dir: Path) -> None:
    """~16 GB kimi-k3 GGUF, 24 layers, 4 shards (the issue's second probe: 16.3 GB, ~96 % expert bytes)."""
    from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3

    scale = float(os.environ.get("LOAD_PROBE_SCALE", "1"))  # a dry run writes a smaller one
    dims = TinyDims(n_embd=256, n_expert=max(4, int(64 * scale)), expert_ff=1024, expert_latent=896)
    t0 = time.monotonic()
    paths = write_tiny_kimi_k3(out_dir, "K3-load", shards=4, seed=5, layers=LAYERS, dims=dims)
    size = sum(p.stat().st_size for p in paths)
    print(f"model: {len(paths)} shards, {size / 1e9:.2f} GB in {time.monotonic() - t0:.1f} s", flush=True)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks: no server is left running


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    what = sys.argv[1]
    if what == "cmake-args":
        profile = parse_profile((HERE / "h200-tiny.yaml").read_text(), "h200-tiny.yaml").profile
        print(json.dumps({"cmake_args": list(cmake_configure_args(profile, collect_host(LinuxHost())))}))
        return
    if what == "write-model":
        write_model(Path(sys.argv[2]))
        return
    stock, patched, model_dir, out = (Path(a) for a in sys.argv[2:6])
    read = Path(sys.argv[6]) if len(sys.argv) > 6 else None  # measure3's third build
    out.mkdir(parents=True, exist_ok=True)
    if what == "table":
        table(out)
        return
    if what == "measure3" and read is None:
        raise SystemExit("measure3 needs READ_BIN (the sixth argument)")
    phase = Phase(stock, patched, model_dir, out, what, read)
    rounds = int(os.environ.get("LOAD_PROBE_ROUNDS", "3"))
    print(f"{what}: hybrid argv {' '.join(argv_for(phase.observed, phase.layers, 'none'))}", flush=True)
    {"measure1": measure1, "measure2": measure2, "measure3": measure3}[what](phase, rounds)


if __name__ == "__main__":
    main()
