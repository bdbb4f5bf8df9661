"""The Docker-built CUDA /app against the native build of the same source, patches and cmake args (issue 28).

    python3 tools/gpu_proof/cuda_image_compare.py IMAGE_BIN NATIVE_BIN MODEL_DIR OUT_DIR

Both llama-servers are started with the argv kimik3 renders for the container (planning/launch.py through
load_probe.argv_for; /models stands for LOAD_PROBE_MOUNT natively), on one synthetic kimi-k3 model, all on the
GPU and hybrid (every layer's experts on the CPU: the AVX-512/AMX kernels and kimik3's pin and read patches in
play). Rounds alternate the order (native image, image native, ...); per load: the 64 greedy tokens at temperature
0, then llama-server's own timings of a second completion (prompt and decode tok/s), and which libraries the
process mapped (libggml-cuda, libcublas, libcudart, libcuda: from /proc/PID/maps). Every load is one JSON line
in OUT_DIR/samples.jsonl, printed as it is recorded. Both builds get LD_LIBRARY_PATH = their own folder,
then CUDA_PIP_LIBS (the pip cuBLAS and cudart folders run-cuda-image.sh finds and records).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from load_probe import Server, argv_for, observe, shards, tokens_and_speeds

ROUNDS = int(os.environ.get("CUDA_IMAGE_ROUNDS", "3"))
WATCHED = ("libggml-cuda", "libggml-base", "libllama", "libcublas.", "libcublasLt", "libcudart", "libcuda.")


def mapped(pid: int) -> dict[str, str]:
    """The watched libraries the process has mapped, by name prefix -> path."""
    found: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        path = parts[-1] if len(parts) >= 6 else ""
        for prefix in WATCHED:
            if "/" + prefix in path:
                found.setdefault(prefix.rstrip("."), path)
    return found


def probe(server: Server) -> dict:
    libraries = mapped(server.process.pid) if server.process else {}
    return {**tokens_and_speeds(server), "mapped": libraries}


def main() -> None:
    image_bin, native_bin, model_dir, out = (Path(a) for a in sys.argv[1:5])
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    observed = observe(model_dir)
    layers = observed.layout.n_layer if observed.layout and observed.layout.n_layer else 24
    deadline = float(os.environ.get("CALL_LIMIT_AT", "0")) or None
    bins = {"native": native_bin, "image": image_bin}
    count = 0
    for placement, n_cpu_moe in (("gpu", 0), ("hybrid", layers)):
        argv = argv_for(observed, n_cpu_moe, "none")
        print(f"{placement}: argv {' '.join(argv)}", flush=True)
        for round_ in range(ROUNDS):
            order = ("native", "image") if round_ % 2 == 0 else ("image", "native")
            for build in order:
                if deadline and deadline - time.time() < 60:
                    print(f"stopping before the call's limit: {placement} round {round_} {build} left out", flush=True)
                    return
                count += 1
                # both builds see the same libraries: their own folder, then the pip cuBLAS/cudart (CUDA_PIP_LIBS)
                paths = [str(bins[build]), *filter(None, os.environ.get("CUDA_PIP_LIBS", "").split(":"))]
                server = Server(
                    bins[build],
                    argv,
                    logs / f"{count:02d}-{placement}-{build}.log",
                    env={"LD_LIBRARY_PATH": ":".join(paths)},
                    deadline=deadline,
                )
                row = {
                    "placement": placement,
                    "build": build,
                    "round": round_,
                    "argv": argv,
                    "model_bytes": sum(p.stat().st_size for p in shards(model_dir)),
                }
                try:
                    row.update(server.start_and_wait())
                    row.update(probe(server))
                except Exception as exc:  # noqa: BLE001 - a failed load is a recorded row; the run goes on
                    row["error"] = str(exc)[-2000:]
                finally:
                    row["stop_s"] = server.stop()
                with open(out / "samples.jsonl", "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(
                    json.dumps(
                        {
                            k: row.get(k)
                            for k in ("placement", "build", "round", "healthy_s", "decode_tps", "prompt_tps", "error")
                        }
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main()
