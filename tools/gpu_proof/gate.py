"""Host gate on a real GPU host: kimik3's collector (real NVML, lscpu, /proc) and gate, with a
foreign process holding memory on GPU 0 (started here). Prints JSON; used on the device machine.

    python3 tools/gpu_proof/gate.py > gate.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.model.facts import LocalInputs, ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.host import collect_host
from kimik3_reconciler.planning.host_gate import host_gate

PROFILE = """
apiVersion: kimik3/v1
name: kimi-k3-gate
model: {repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: UD-Q2_K_XL}
build: {source: mainline, cuda_architectures: ["90"]}
gpus: GPUS
"""


class NoDocker:  # the device machine has no Docker engine: GPU plumbing is reported as unknown
    def info(self) -> dict:
        return {"Runtimes": {"nvidia": {}}}


def gate(gpus: str, share: bool = False) -> dict:
    text = PROFILE.replace("GPUS", gpus) + ("share_gpus: true\n" if share else "")
    profile = parse_profile(text).profile
    host = collect_host(LinuxHost(), NoDocker())
    model = ModelFact(
        repo=profile.model.repo,
        revision=profile.model.revision,
        quant="UD-Q2_K_XL",
        cache_dir="/c",
        files=(RemoteFile(path="UD-Q2_K_XL/a.gguf", size=1 << 30),),
    )
    refusals, warnings = host_gate(
        profile, Observed(host=host, inputs=LocalInputs(dockerfile_path="-", dockerfile_sha256="-"), model=model)
    )
    return {
        "gpus": gpus,
        "share_gpus": share,
        "refusals": refusals,
        "warnings": warnings,
        "facts": host.model_dump(mode="json", exclude={"cpu_flags"}),
    }


def main() -> None:
    results = [gate("[0]")]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import torch, time; x = torch.empty(10 << 30, dtype=torch.uint8, "
            "device='cuda'); print('holding', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
    )
    holder.stdout.readline()
    time.sleep(1)
    results += [gate("[0]"), gate("[0]", share=True), gate("[1]"), gate("all")]
    holder.kill()
    print(json.dumps({"foreign_pid": holder.pid, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
