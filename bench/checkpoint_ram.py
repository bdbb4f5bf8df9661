"""Check: the host RAM llama-server's context checkpoints fill, against the sizing gate's estimate
(engines/llamacpp/host_ram.py: serve.parallel x --ctx-checkpoints x one sequence's recurrent state).

    .venv/bin/python bench/checkpoint_ram.py [--turns 20] [--runs 1]

One llama-server container of the demo image (build b11434, kimik3's fixed flags) serving a tiny kimi-k3 GGUF whose
KDA layers are made large enough for their state to show in RSS: 16 layers (8 KDA), 4 heads of 128 (Kimi-K3's head
size), conv 4: 8 x (3 x 3 x 512 + 128 x 128 x 4) x 4 bytes = 2,244,608 bytes a sequence, read back through kimik3's
own GGUF summary. Two slots, `--cache-ram 0` (no prompt cache: what stays is in the slots), two conversations at
once, each pinned to its slot, growing by ~400 tokens a turn (a byte a token), so every turn makes checkpoints near
its prompt's end until the slot holds `--ctx-checkpoints`. The same run with `--ctx-checkpoints 1` is the baseline
(with 0 a recurrent slot re-reads its whole conversation every turn: minutes a run here): the difference in the
server's RSS growth (VmRSS of its process, from /proc) is what the extra checkpoints hold. The server's own log
(verbosity 4) says how many each slot held and each one's size.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import httpx  # noqa: E402
from support.llama_replicas import DEMO_IMAGE  # noqa: E402
from support.ports import free_port  # noqa: E402

from kimik3_reconciler.engines import engine_for  # noqa: E402
from kimik3_reconciler.engines.llamacpp.gguf_header import parse_gguf_header, summarize  # noqa: E402
from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3  # noqa: E402

NAME = "k3ckpt-ram"
SLOTS = 2
MIB = 1 << 20
CREATED = re.compile(r"slot +\w+: id +(\d+) .*created context checkpoint (\d+) of (\d+) .*size = ([\d.]+) MiB")


def write_model(folder: Path) -> tuple[Path, int]:
    """The large-state tiny model and its recurrent state a sequence, as kimik3's GGUF summary reads it."""
    dims = TinyDims(n_head=4, kda_head_dim=128, context_length=32768)
    (path,) = write_tiny_kimi_k3(folder, "Kimi-K3-tiny-bigstate", shards=1, layers=16, dims=dims)
    return path, summarize([parse_gguf_header(path.read_bytes())]).state_bytes_per_slot


def start(model: Path, port: int, checkpoints: int) -> None:
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    argv = [
        *("docker", "run", "-d", "--name", NAME, "--network", "host", "-v", f"{model.parent}:/models:ro"),
        DEMO_IMAGE,
        *("-m", f"/models/{model.name}", "--host", "127.0.0.1", "--port", str(port)),
        *engine_for("llamacpp").owned_flags(1, "none"),
        *("--ctx-size", str(SLOTS * 16384), "--parallel", str(SLOTS), "--cache-ram", "0"),
        *("--ctx-checkpoints", str(checkpoints), "--log-verbosity", "4"),
    ]
    subprocess.run(argv, check=True, capture_output=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("llama-server did not answer /health in 120 s")


def rss_bytes() -> int:
    """VmRSS of the container's main process (llama-server), from the host's /proc."""
    pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", NAME], capture_output=True, text=True).stdout
    status = Path(f"/proc/{pid.strip()}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024


def conversation(port: int, slot: int, turns: int) -> None:
    """One chat on one slot: each turn re-sends the whole conversation with ~700 new characters."""
    messages = [{"role": "system", "content": f"agent {slot}: " + "read the files and fix the tests. " * 30}]
    with httpx.Client(timeout=300) as client:
        for turn in range(turns):
            messages.append({"role": "user", "content": f"turn {turn} result: " + f"line {turn} ok; " * 28})
            reply = client.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"messages": messages, "max_tokens": 4, "id_slot": slot, "cache_prompt": True},
            )
            reply.raise_for_status()
            messages.append({"role": "assistant", "content": reply.json()["choices"][0]["message"]["content"] or "."})


def held_checkpoints(log: str) -> tuple[dict[int, int], list[float]]:
    """(per slot, the checkpoints it held after its last creation: `created … N of M`; every size logged, MiB)."""
    held, sizes = {}, []
    for match in CREATED.finditer(log):
        held[int(match.group(1))] = int(match.group(2))
        sizes.append(float(match.group(4)))
    return held, sizes


def run(model: Path, checkpoints: int, turns: int) -> dict:
    port = free_port()
    start(model, port, checkpoints)
    try:
        before = rss_bytes()
        print(f"--ctx-checkpoints {checkpoints}: RSS before the requests {before / MIB:.1f} MiB", flush=True)
        threads = [threading.Thread(target=conversation, args=(port, s, turns)) for s in range(SLOTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(1)
        after = rss_bytes()
        log = subprocess.run(["docker", "logs", NAME], capture_output=True, text=True).stderr
    finally:
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    held, sizes = held_checkpoints(log)
    return {"checkpoints": checkpoints, "rss_before": before, "rss_after": after, "held": held, "sizes_mib": sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model, state = write_model(Path(folder))
        rows = []
        for _ in range(args.runs):
            for checkpoints in (1, 32):
                row = run(model, checkpoints, args.turns)
                rows.append(row)
                held = sum(row["held"].values())
                grew = row["rss_after"] - row["rss_before"]
                sizes = sorted(set(row["sizes_mib"]))
                print(
                    f"--ctx-checkpoints {checkpoints}: RSS {row['rss_before'] / MIB:.1f} -> "
                    f"{row['rss_after'] / MIB:.1f} MiB (+{grew / MIB:.1f}); checkpoints held {row['held']} "
                    f"(= {held}); sizes logged {sizes} MiB; kimik3's estimate {SLOTS} x {checkpoints} x "
                    f"{state / MIB:.3f} MiB = {SLOTS * checkpoints * state / MIB:.1f} MiB, held x state = "
                    f"{held * state / MIB:.1f} MiB",
                    flush=True,
                )
        print(json.dumps({"state_bytes": state, "rows": rows}))


if __name__ == "__main__":
    main()
