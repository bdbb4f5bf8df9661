"""The latency proxy's cost on a GPU host without Docker (issue 17): kimik3's rendered llama-server argv run natively,
kimik3's proxy started exactly as apply starts it (`python -m kimik3_reconciler metrics-serve NAME`, reading the
exporter configuration kimik3 rendered from the state directory), and bench/proxy_measure.py's measurement.

    python3 tools/gpu_proof/proxy_native.py RENDERED_JSON LLAMA_BIN_DIR OUT_DIR [--rounds 5] [--budget 120]

Two rows, one run:
  pinned: llama-server on one set of cores, the proxy on two others, this client on the rest (`taskset`), so
    the proxy does not compete with the server for a core: rounds of c8 tok/s direct vs proxied and c1 TTFT pairs;
  unpinned: then every thread of the server, the proxy and this client gets every core back (what a user gets
    by default; no reload) and the c8 rounds are measured again.
Writes OUT_DIR/proxy-h200.json: every round (what its ratios are computed from), the medians, the argv and the
exporter configuration, the tails of both processes' logs (kept whole in --logs).
MODELS_ROOT (default /models): where the argv's /models paths live on this host (a dry run elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.proxy_measure import GOAL, load, measure  # noqa: E402
from kimik3_reconciler.adapters.state_files import StateFiles  # noqa: E402
from kimik3_reconciler.model.helpers import EXPORTER  # noqa: E402
from kimik3_reconciler.model.metrics import ExporterConfig  # noqa: E402
from kimik3_reconciler.model.records import exporter_config_key  # noqa: E402


def core_sets(cores: int) -> dict[str, list[int]]:
    """server: all but the last six cores; proxy: the two after; client: the last four. On a small dry-run host
    (fewer than 8 cores) the sets overlap: the run proves the script, not the numbers."""
    if cores < 8:
        return {"server": [0], "proxy": [cores - 1], "client": [cores - 1]}
    return {"server": list(range(cores - 6)), "proxy": [cores - 6, cores - 5], "client": list(range(cores - 4, cores))}


def cpulist(cpus: list[int]) -> str:
    return ",".join(map(str, cpus))


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` (a process's threads keep the mask they were created with)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


def affinity(pid: int) -> str:
    return cpulist(sorted(os.sched_getaffinity(pid)))


def thread_masks(pid: int) -> dict[str, int]:
    """How many of the process's threads run on each CPU mask (llama-server's --numa distribute sets its own
    workers' masks, over taskset's)."""
    masks: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            mask = affinity(int(tid))
        except ProcessLookupError:
            continue
        masks[mask] = masks.get(mask, 0) + 1
    return masks


def wait_http(url: str, timeout_s: float, process: subprocess.Popen, accept=lambda body: True) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if process.poll() is not None:
            raise SystemExit(f"{process.args[0]} exited {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200 and accept(reply.read()):
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout_s:.0f} s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rendered", type=Path)
    parser.add_argument("bindir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--logs",
        type=Path,
        default=Path("/tmp/k3px17-logs"),
        help="the processes' logs (their tails go into the JSON: the device returns few files)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--requests",
        type=int,
        default=0,
        help="completions per client at c8 (0: sized so that "
        "one side of a round streams for about --side-seconds at the direct port's rate)",
    )
    parser.add_argument("--side-seconds", type=float, default=2.5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=30, help="interleaved direct/proxy TTFT pairs per round")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds from now: rounds stop early past it")
    args = parser.parse_args()
    began = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    args.logs.mkdir(parents=True, exist_ok=True)
    rendered = json.loads(args.rendered.read_text())
    config = ExporterConfig.from_json(rendered["exporter"])
    models_root = os.environ.get("MODELS_ROOT", "/models")
    argv = [
        a.replace("/models/", models_root.rstrip("/") + "/", 1) if a.startswith("/models/") else a
        for a in rendered["argv"]
    ]
    cores = os.cpu_count() or 1
    sets = core_sets(cores)
    every = set(range(cores))

    # The state directory apply would have written: the exporter's configuration under its key (steps/exporter.py).
    state_dir = Path("/tmp/k3px17-state")
    StateFiles(state_dir).write(exporter_config_key(config.profile), config.to_json())

    env = {**os.environ, "LD_LIBRARY_PATH": f"{args.bindir}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    server_log = open(args.logs / "server.log", "w")
    server = subprocess.Popen(
        ["taskset", "-c", cpulist(sets["server"]), str(args.bindir / "llama-server"), *argv],
        cwd=args.bindir,
        stdout=server_log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    proxy_log = open(args.logs / "exporter.log", "w")
    # As LocalProcesses.spawn starts it (adapters/processes.py), under taskset (which execs: the pid is the proxy's).
    proxy = subprocess.Popen(
        [
            "taskset",
            "-c",
            cpulist(sets["proxy"]),
            sys.executable,
            "-m",
            "kimik3_reconciler",
            EXPORTER.command,
            config.profile,
        ],
        stdin=subprocess.DEVNULL,
        stdout=proxy_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "KIMIK3_STATE_DIR": str(state_dir)},
    )
    result: dict = {
        "cores": cores,
        "argv": rendered["argv"],
        "exporter": rendered["exporter"],
        "goal": GOAL,
        "settings": {"rounds": args.rounds, "requests": args.requests, "tokens": args.tokens, "pairs": args.pairs},
    }
    try:
        result["server_ready_s"] = round(wait_http(config.server_url + "/health", 180, server), 2)
        wait_http(config.health_url, 30, proxy, lambda body: json.loads(body).get("fingerprint") == config.fingerprint)
        os.sched_setaffinity(0, set(sets["client"]))
        direct = config.server_url
        proxied = f"http://127.0.0.1:{config.proxy_port}"
        result["pinned"] = {
            "cpus": {"server": affinity(server.pid), "proxy": affinity(proxy.pid), "client": affinity(os.getpid())}
        }
        print(
            f"pinned: server cores {result['pinned']['cpus']['server']}, proxy {result['pinned']['cpus']['proxy']}, "
            f"client {result['pinned']['cpus']['client']} (of {cores}); server ready in {result['server_ready_s']} s"
        )
        if not args.requests:  # calibrate on the direct port: a round's length, whatever the decode rate
            rate, _, _ = asyncio.run(load(direct, 8, 1, args.tokens))
            args.requests = max(2, round(args.side_seconds * rate / (8 * args.tokens)))
            result["settings"].update(requests=args.requests, calibration_tok_s=round(rate, 1))
            print(f"calibration: direct c8 {rate:.0f} tok/s -> {args.requests} requests per client per side")
        remaining = args.budget - (time.monotonic() - began)
        result["pinned"].update(
            measure(
                direct,
                proxied,
                proxy.pid,
                args.rounds,
                args.requests,
                args.tokens,
                args.pairs,
                deadline=time.monotonic() + remaining * 0.6,
            )
        )
        result["pinned"]["server_thread_masks"] = thread_masks(server.pid)
        for pid in (server.pid, proxy.pid, os.getpid()):
            set_affinity(pid, every)
        result["unpinned"] = {
            "cpus": {"server": affinity(server.pid), "proxy": affinity(proxy.pid), "client": affinity(os.getpid())}
        }
        print(f"unpinned: server, proxy and client on cores {result['unpinned']['cpus']['server']}")
        result["unpinned"].update(
            measure(
                direct, proxied, proxy.pid, args.rounds, args.requests, args.tokens, 0, deadline=began + args.budget - 5
            )
        )
        try:  # the proxy's own series, as Prometheus would scrape them (the deployment's part may fail here)
            with urllib.request.urlopen(f"http://{config.bind}:{config.port}/metrics", timeout=10) as reply:
                result["proxy_series"] = sorted(
                    {
                        line.split("{")[0]
                        for line in reply.read().decode().splitlines()
                        if line.startswith("kimik3_proxy_")
                    }
                )
        except OSError as exc:
            result["proxy_series"] = f"scrape failed: {exc}"
        try:  # the GPU and what the server holds on it (none on a CPU dry run)
            result["gpu"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.used,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            result["gpu"] = f"none ({exc})"
    finally:
        stop(proxy)
        stop(server)
        result["seconds"] = round(time.monotonic() - began, 1)
        for name in ("server", "exporter"):
            result[f"{name}_log_tail"] = (args.logs / f"{name}.log").read_text(errors="replace").splitlines()[-25:]
        (args.out / "proxy-h200.json").write_text(json.dumps(result, indent=1))
    for label in ("pinned", "unpinned"):
        row = result[label]
        line = (
            f"{label}: c8 tok/s proxy/direct median {row['tok_s_ratio_c8']:.3f} "
            f"(range {row['tok_s_ratio_c8_range'][0]:.3f}-{row['tok_s_ratio_c8_range'][1]:.3f}, "
            f"{row['rounds']} rounds, direct {row['c8_tok_s_direct']:.0f} tok/s); "
            f"proxy CPU {row['proxy_cpu_us_per_token']:.0f} us/token"
        )
        if "ttft_p50_added_ms_c1" in row:
            line += f"; added TTFT p50 c1 {row['ttft_p50_added_ms_c1']:+.2f} ms"
        print(line)
    print(f"total {result['seconds']} s")


if __name__ == "__main__":
    main()
