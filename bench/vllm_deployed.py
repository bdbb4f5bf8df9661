"""Benchmark: vLLM as kimik3 deploys it against the same vLLM started by hand with the same argv (issue 25: the
deployment must not cost throughput; goal: ratio >= 0.98).

    .venv/bin/python bench/vllm_deployed.py NAME [--seconds 20] [--rounds 3] [--concurrency 4] [--max-tokens 32]

NAME is the container of an applied `engine: vllm` profile (e.g. tests/integration/test_vllm_docker.py's setup, or
profiles/vllm-tp8.yaml on GPUs). The hand-started twin is `docker run` of the same image, argv, environment and
read-only mounts on another port (host network and IPC as the seed's command), named NAME-hand, removed at the end.
Each round drives the deployed server and the twin (which goes first alternates), with `--concurrency` closed-loop
clients for `--seconds`
(POST /v1/completions, `ignore_eos`, `max_tokens` fixed, temperature 0): aggregate generated tokens per second from
the servers' own `usage.completion_tokens`. Rounds alternate so a busy machine slows both alike; the claim is the
ratio of the medians (deployed / hand), with every round printed.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.realparts import serves  # noqa: E402


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout.strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_twin(name: str) -> tuple[str, int, int, str]:
    """(the twin's name, its port, the deployed server's port, the served model name)."""
    found = json.loads(_docker("inspect", name))[0]
    config, host = found["Config"], found["HostConfig"]
    argv = list(config["Cmd"])
    deployed_port = int(argv[argv.index("--port") + 1])
    served = argv[argv.index("--served-model-name") + 1]
    port = _free_port()
    argv[argv.index("--port") + 1] = str(port)
    image_env = set(json.loads(_docker("image", "inspect", found["Image"]))[0]["Config"].get("Env") or [])
    options = ["--network", host["NetworkMode"], "--ipc", host["IpcMode"]]
    for item in config["Env"]:
        if item not in image_env:  # the image's own PATH etc. come with the image
            options += ["-e", item]
    for mount in found["Mounts"]:
        options += ["--mount", f"type=bind,src={mount['Source']},dst={mount['Destination']},readonly"]
    twin = f"{name}-hand"
    subprocess.run(["docker", "rm", "-f", twin], capture_output=True)
    _docker("run", "-d", "--name", twin, *options, found["Image"], *argv)
    deadline = time.monotonic() + 600
    while not serves(port):
        if time.monotonic() > deadline:
            raise SystemExit(f"{twin} did not answer /health on port {port} within 600 s")
        time.sleep(1)
    return twin, port, deployed_port, served


def drive(port: int, model: str, seconds: float, concurrency: int, max_tokens: int) -> float:
    """Aggregate generated tokens per second of `concurrency` closed-loop clients over `seconds`."""
    body = json.dumps(
        {
            "model": model,
            "prompt": "The quick brown fox jumps over the lazy dog. " * 4,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
        }
    ).encode()
    tokens = [0] * concurrency
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        while time.monotonic() < stop:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=300) as answer:
                tokens[i] += json.load(answer)["usage"]["completion_tokens"]

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(tokens) / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name", help="the deployed vLLM container (the profile's name)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    twin, port, deployed_port, served = start_twin(args.name)
    try:
        drive(deployed_port, served, 3, args.concurrency, args.max_tokens)  # warm-up, uncounted
        drive(port, served, 3, args.concurrency, args.max_tokens)
        deployed, hand = [], []
        for round_ in range(1, args.rounds + 1):
            # Which server goes first alternates too: a machine getting busier or quieter within a round must not
            # favour one of them.
            order = [(deployed, deployed_port), (hand, port)]
            for results, server in order if round_ % 2 else reversed(order):
                results.append(drive(server, served, args.seconds, args.concurrency, args.max_tokens))
            first = "deployed" if round_ % 2 else "hand"
            print(
                f"round {round_} ({first} first): kimik3-deployed {deployed[-1]:.1f} tok/s, hand-started "
                f"{hand[-1]:.1f} tok/s"
            )
        ratio = statistics.median(deployed) / statistics.median(hand)
        print(
            f"c{args.concurrency}, {args.max_tokens} tokens a request, {args.seconds:g} s a round, {args.rounds} "
            f"rounds: median {statistics.median(deployed):.1f} vs {statistics.median(hand):.1f} tok/s, "
            f"deployed/hand {ratio:.3f} (goal >= 0.98)"
        )
    finally:
        subprocess.run(["docker", "rm", "-f", twin], capture_output=True)


if __name__ == "__main__":
    main()
