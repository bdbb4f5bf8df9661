"""Forecast vs llama-server's --fit on a real GPU (issue 4): for each fit_target, kimik3 forecasts
the placement of a synthetic kimi-k3 GGUF from live NVML facts, then llama-server (rendered argv)
loads it; its log says what --fit chose. Prints one JSON object per case.

    python3 tools/gpu_proof/forecast_cases.py MODEL.gguf LLAMA_SERVER_DIR
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.engines.llamacpp.gguf_header import parse_gguf_header, summarize
from kimik3_reconciler.engines.llamacpp.placement import forecast
from kimik3_reconciler.model.facts import LocalInputs, ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.host import collect_host
from kimik3_reconciler.planning.launch import render_launch

MIB = 1 << 20
REV = "d3e0c0de" * 5
PROFILE = f"""
apiVersion: kimik3/v1
name: k3-forecast
model: {{repo: kimik3-demo/Kimi-K3-tiny-GGUF, revision: {REV}, quant: UD-SYNTH, cache_dir: /models-cache}}
build: {{source: mainline, variant: cuda, cuda_architectures: ["90"], cpu_features: auto}}
gpus: [0]
serve: {{port: 18191, ctx_size: 4096, parallel: 1, fit_target: FIT}}
gate: {{smoke: false}}
"""


class NoDocker:
    def info(self) -> dict:
        return {"Runtimes": {"nvidia": {}}}


def actual(log: str) -> dict:
    gpu = re.findall(r"CUDA0 model buffer size =\s+([\d.]+) MiB", log)
    host = re.findall(r"CUDA_Host model buffer size =\s+([\d.]+) MiB", log)
    compute = re.findall(r"CUDA0 compute buffer size =\s+([\d.]+) MiB", log)
    final = log[log.index("successfully fit params") :] if "successfully fit params" in log else log
    # only the real load counts: --fit's throw-away passes put every expert on the host first
    cpu_layers = sorted(
        {
            int(m)
            for m in re.findall(
                r"tensor blk\.(\d+)\.ffn_\w+_exps\.weight .*buffer type overridden to "
                r"CUDA_Host",
                final,
            )
        }
    )
    return {
        "gpu_weights_mib": float(gpu[-1]) if gpu else None,
        "host_weights_mib": float(host[-1]) if host else None,
        "compute_mib": float(compute[-1]) if compute else None,
        "cpu_expert_layers": cpu_layers,
    }


def run_case(model: Path, bindir: Path, fit_target: int) -> dict:
    profile = parse_profile(PROFILE.replace("FIT", str(fit_target))).profile
    host = collect_host(LinuxHost(), NoDocker())
    layout = summarize([parse_gguf_header(model.read_bytes()[: 8 << 20])])
    files = (RemoteFile(path=f"UD-SYNTH/{model.name}", size=model.stat().st_size),)
    observed = Observed(
        host=host,
        inputs=LocalInputs(dockerfile_path="-", dockerfile_sha256="-"),
        layout=layout,
        model=ModelFact(
            repo=profile.model.repo, revision=REV, quant="UD-SYNTH", cache_dir="/models-cache", files=files
        ),
    )
    predicted = forecast(profile, observed)
    argv = list(render_launch(profile, observed, "img", "fp").spec.command)
    with open(f"/tmp/server-{fit_target}.log", "w") as log:
        server = subprocess.Popen(
            [str(bindir / "llama-server"), *argv, "-lv", "5"],
            cwd=bindir,
            stdout=log,
            stderr=log,
            env={**os.environ, "LD_LIBRARY_PATH": f"{bindir}:{os.environ.get('LD_LIBRARY_PATH', '')}"},
        )
        for _ in range(600):
            try:
                if urllib.request.urlopen("http://127.0.0.1:18191/health", timeout=2).status == 200:
                    break
            except Exception:
                if server.poll() is not None:
                    break
            time.sleep(0.2)
        server.terminate()
        server.wait()
    text = Path(f"/tmp/server-{fit_target}.log").read_text(errors="replace")
    free = host.gpus[0].memory_free // MIB
    return {
        "fit_target_mib": fit_target,
        "nvml_free_mib": free,
        "forecast": {
            "mode": predicted.mode,
            "cpu_expert_layers": list(predicted.cpu_expert_layers),
            "gpu_weights_mib": round(predicted.devices[0].weight_bytes / MIB, 1),
            "host_weights_mib": round(predicted.host_bytes / MIB, 1),
        },
        "actual": actual(text),
        "fit_log": [ln for ln in text.splitlines() if "common_params_fit_impl" in ln or "fit_params" in ln][-8:],
    }


def main() -> None:
    model, bindir = Path(sys.argv[1]), Path(sys.argv[2])
    free = collect_host(LinuxHost(), NoDocker()).gpus[0].memory_free // MIB
    # all experts fit / about half of them / only a few: margins that leave 1.6 GB and 0.9 GB usable
    for fit_target in (1024, free - 528 - 1600, free - 528 - 900):
        print(json.dumps(run_case(model, bindir, fit_target)), flush=True)


if __name__ == "__main__":
    main()
