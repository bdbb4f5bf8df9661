"""What a Docker build of a profile's image would compile, for a native build on a GPU host (issue 28's fork pin):
kimik3's own image step renders it (observe/local_inputs + engines/llamacpp/image.render_image_build: `render_here`,
which tools/cuda_image/build.py renders with before it builds), and this writes it beside the carried source instead of building.

    python3 tools/gpu_proof/fork_args.py PROFILE OUT_DIR     (OUT_DIR: .fork28, carried to the device)

OUT_DIR/rendered.json: {"cmake_args": [...], "build_args": {...}, "patches": [...], "tag", "fingerprint"};
OUT_DIR/patches/: kimik3's patches under the names the image's build context gives them (the order they apply in).
run-fork-build.sh reads both (lib.sh's build_llama: the cmake args of rendered.json, LLAMA_PATCHES in name order).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from kimik3_reconciler.adapters import real_ports
from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.engines.llamacpp.image import render_image_build
from kimik3_reconciler.model.facts import LocalInputs, ModelFact, Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import ImageBuild
from kimik3_reconciler.observe.host import collect_host
from kimik3_reconciler.observe.local_inputs import collect_inputs
from kimik3_reconciler.ports import StatePort

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile.llamacpp"


def render_here(profile: Profile, folder: Path, state: StatePort) -> tuple[ImageBuild, LocalInputs]:
    """The image build kimik3's image step renders for `profile` (its local inputs beside it in `folder`) on this
    host, the model left out (its files do not change the image); and those inputs."""
    inputs = collect_inputs(profile, folder, DOCKERFILE, state)
    model = ModelFact(
        repo=profile.model.repo,
        revision=profile.model.revision,
        quant=profile.model.quant,
        cache_dir=profile.model.cache_dir,
        files=(),
    )
    return render_image_build(profile, Observed(host=collect_host(LinuxHost()), inputs=inputs, model=model)), inputs


def main() -> None:
    path, out = Path(sys.argv[1]), Path(sys.argv[2])
    profile = parse_profile(path.read_text(), str(path)).profile
    ports = real_ports(Path("/tmp/kimik3-fork-args-state"))
    spec, inputs = render_here(profile, path.resolve().parent, ports.state)
    (out / "patches").mkdir(parents=True, exist_ok=True)
    for name, source in spec.patches:
        shutil.copyfile(source, out / "patches" / name)
    build_args = dict(spec.build_args)
    rendered = {
        "tag": spec.tag,
        "fingerprint": spec.fingerprint,
        "build_args": build_args,
        "cmake_args": build_args["CMAKE_ARGS"].split(),
        "patches": [n for n, _ in spec.patches],
        "profile": path.name,
        "source_sha256": inputs.archive_sha256,
    }
    (out / "rendered.json").write_text(json.dumps(rendered, indent=1) + "\n")
    print(json.dumps(rendered, indent=1))


if __name__ == "__main__":
    main()
