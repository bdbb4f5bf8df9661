"""Benchmark control for bench/vllm_deployed.py: is kimik3-deployed vLLM slower than a hand-started twin, or is it the
machine's noise? Three servers at once: D (kimik3's container NAME), H1 and H2 (docker-run twins of the same image,
argv, env, mounts, host network/IPC, as bench/vllm_deployed.start_twin makes them). Each round drives each server for
--seconds at c4 (bench's drive), the order rotating round to round; prints every round and the ratios of medians
D/H1, D/H2 and H2/H1: the last is two identical hand-started servers (an A/A control), so a D/H ratio inside its
distance from 1 is not the deployment's.

    .venv/bin/python bench/vllm_deployed_aa.py NAME [--rounds 12] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_deployed import _docker, _free_port, _healthy, drive  # noqa: E402

NAME = ""  # the deployed container (argv)


def twin(suffix: str) -> int:
    """A docker-run twin of NAME named NAME-SUFFIX on a free port, healthy; its port."""
    found = json.loads(_docker("inspect", NAME))[0]
    config, host = found["Config"], found["HostConfig"]
    argv = list(config["Cmd"])
    port = _free_port()
    argv[argv.index("--port") + 1] = str(port)
    image_env = set(json.loads(_docker("image", "inspect", found["Image"]))[0]["Config"].get("Env") or [])
    options = ["--network", host["NetworkMode"], "--ipc", host["IpcMode"]]
    options += [x for item in config["Env"] if item not in image_env for x in ("-e", item)]
    for mount in found["Mounts"]:
        options += ["--mount", f"type=bind,src={mount['Source']},dst={mount['Destination']},readonly"]
    subprocess.run(["docker", "rm", "-f", f"{NAME}-{suffix}"], capture_output=True)
    _docker("run", "-d", "--name", f"{NAME}-{suffix}", *options, found["Image"], *argv)
    deadline = time.monotonic() + 600
    while not _healthy(port):
        if time.monotonic() > deadline:
            raise SystemExit(f"{NAME}-{suffix} did not answer /health on port {port} within 600 s")
        time.sleep(1)
    return port


def main() -> None:
    global NAME
    parser = argparse.ArgumentParser()
    parser.add_argument("name", help="the deployed vLLM container (the profile's name)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    NAME = args.name
    deployed = json.loads(_docker("inspect", NAME))[0]["Config"]["Cmd"]
    ports = {"D": int(deployed[deployed.index("--port") + 1]), "H1": twin("h1"), "H2": twin("h2")}
    results: dict[str, list[float]] = {k: [] for k in ports}
    try:
        for port in ports.values():
            drive(port, NAME, 3, 4, 32)  # warm-up, uncounted
        names = list(ports)
        for r in range(args.rounds):
            order = names[r % 3 :] + names[: r % 3]
            for key in order:
                results[key].append(drive(ports[key], NAME, args.seconds, 4, 32))
            print(
                f"round {r + 1} ({' '.join(order)}): " + ", ".join(f"{k} {results[k][-1]:.1f}" for k in names),
                flush=True,
            )
        med = {k: statistics.median(v) for k, v in results.items()}
        for k, v in results.items():
            print(f"{k}: median {med[k]:.1f} tok/s, min {min(v):.1f}, max {max(v):.1f}, rounds {len(v)}")
        print(
            f"D/H1 {med['D'] / med['H1']:.3f}  D/H2 {med['D'] / med['H2']:.3f}  H2/H1 (A/A) {med['H2'] / med['H1']:.3f}"
        )
        wins = sum(d < min(h1, h2) for d, h1, h2 in zip(results["D"], results["H1"], results["H2"]))
        print(f"rounds where D was the slowest of the three: {wins} of {args.rounds}")
        print(json.dumps(results))
    finally:
        for suffix in ("h1", "h2"):
            subprocess.run(["docker", "rm", "-f", f"{NAME}-{suffix}"], capture_output=True)


if __name__ == "__main__":
    main()
