"""Build a profile's image with kimik3's own image step, on a machine without a GPU (issue 28).

    python3 tools/cuda_image/build.py PROFILE [--state-dir DIR] [--json OUT.json]

`kimik3 apply` observes the host's GPUs first and its host gate refuses a CUDA profile where there are none; the
image step itself needs only dockerd. This runs the same code `apply` runs for that step: the profile parsed and
its local inputs collected (the archive hashed, kimik3's built-in patches for the variant), the build rendered
(engines/llamacpp/image.render_image_build: tag, fingerprint, labels, the Dockerfile's build args) and executed
(steps/image.build_image: the base images, the build context, the real Docker adapter). Build lines go to stderr;
the summary (tag, image id, fingerprint, build args, wall seconds) to stdout or --json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu_proof"))

from fork_args import render_here  # noqa: E402 - beside it in tools/gpu_proof

from kimik3_reconciler.adapters import real_ports  # noqa: E402
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.steps.image import build_image


class Lines:
    """The build's lines on stderr with the seconds since the start (a CUDA compile on 2 cores takes an hour)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def _say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.0f}s] {text}", file=sys.stderr, flush=True)

    def progress(self, task: str, done: int, total: int, **fields: object) -> None:
        pass

    def line(self, source: str, text: str) -> None:
        self._say(text)

    def event(self, name: str, **fields: object) -> None:
        self._say(f"{name} {fields}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--state-dir", type=Path, default=Path("/tmp/kimik3-image-build-state"))
    parser.add_argument("--json", type=Path, help="write the summary here too")
    args = parser.parse_args(argv)
    profile = parse_profile(args.profile.read_text(), str(args.profile)).profile
    ports = real_ports(args.state_dir)
    spec, _ = render_here(profile, args.profile.resolve().parent, ports.state)
    reporter = Lines()
    reporter.event("build", tag=spec.tag, fingerprint=spec.fingerprint, patches=[name for name, _ in spec.patches])
    t0 = time.monotonic()
    build_image(spec, ports, reporter)
    seconds = round(time.monotonic() - t0)
    image = ports.docker.inspect_image(spec.tag) or {}
    summary = {
        "tag": spec.tag,
        "image_id": image.get("Id"),
        "fingerprint": spec.fingerprint,
        "build_args": dict(spec.build_args),
        "patches": [name for name, _ in spec.patches],
        "build_seconds": seconds,
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
