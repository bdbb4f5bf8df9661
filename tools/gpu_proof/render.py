"""Render, with kimik3's own functions, what the GPU proof runs natively on a GPU host.

    python3 tools/gpu_proof/render.py PROFILE TINY_MODEL_DIR [DRAFT_GGUF] > rendered.json

Host facts come from this host (lscpu, /proc/cpuinfo) through kimik3's collector, so
`cpu_features: auto` resolves as it would on a real deployment host. Prints JSON with the cmake
configure arguments (what Dockerfile.llamacpp receives as CMAKE_ARGS) and the llama-server argv
kimik3 renders for the container, whose model paths live under the container's /models mount; with a
`metrics:` section also the exporter's configuration kimik3 renders (planning/metrics_step.py), which
`kimik3 metrics-serve NAME` reads from the state directory (run-proxy.sh writes it there as apply would).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.engines.llamacpp.build_flags import cmake_configure_args
from kimik3_reconciler.engines.llamacpp.image import render_image_build
from kimik3_reconciler.model.facts import LocalInputs, ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.host import collect_host
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.launch import render_launch
from kimik3_reconciler.planning.metrics_step import render_exporter


def main() -> None:
    profile = parse_profile(Path(sys.argv[1]).read_text(), sys.argv[1]).profile
    tiny = Path(sys.argv[2])
    host = collect_host(LinuxHost())
    q = profile.model.quant
    files = tuple(RemoteFile(path=f"{q}/{p.name}", size=p.stat().st_size) for p in sorted(tiny.glob("*.gguf")))
    model = ModelFact(
        repo=profile.model.repo,
        revision=profile.model.revision,
        quant=q,
        cache_dir=profile.model.cache_dir,
        files=files,
    )
    draft = sys.argv[3] if len(sys.argv) > 3 else None
    inputs = LocalInputs(dockerfile_path="Dockerfile.llamacpp", dockerfile_sha256="-", draft_model=draft)
    observed = Observed(host=host, inputs=inputs, model=model)
    image = render_image_build(profile, observed)
    launch = render_launch(profile, observed, image.tag, image.fingerprint)
    exporter = render_exporter(Desired(profile, image, launch), observed)
    print(
        json.dumps(
            {
                "host": host.model_dump(),
                "cmake_args": list(cmake_configure_args(profile, host)),
                "argv": list(launch.spec.command),
                "mounts": [[m.source, m.target] for m in launch.spec.mounts],
                "health_url": launch.health_url,
                "exporter": exporter.to_json() if exporter is not None else None,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
