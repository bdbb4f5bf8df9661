"""The pin table: which llama.cpp commit each `build.source` builds by default (`BuildSpec.pin` reaches it through
the registry: model/engine_names.py, the building engine's `pins`; the value, model/pins.py `SourcePin`).

Facts from shared/reference/upstream.md ("Upstream facts for the pin table", read 2026-12):

- mainline = ggml-org/llama.cpp `ad1de39e0708e3ced9c71bb3c82d93a2c046a73f` (2026-08-15),
  "model: add Kimi-K3 text model (#26185)": text only, the seed's "at/after ad1de39". Public
  projects pinning this commit name it release tag `b10448`, so its build number is 10448.
- fork = unslothai/llama.cpp `edfd4c1a3b7a653303a85257ddac2a1f3ce39a2f` (2026-08-17), head of
  PR #70 (branch `kimi-k3-vision-only`, open): three commits on upstream `34af94cd9`
  (release `b10470`, so 10470 + 3 = build 10473). PR #70 was force-pushed once, so a pin is
  always a commit, never the branch (seed 000: "you want a pinned commit, not a moving latest").
- Vision (`--mmproj`, MoonViT-3d) exists only in the fork; mainline's CLIP loader rejects
  `clip.projector_type = kimik3` (tracked in ggml-org/llama.cpp#28264).
- Source archives: `https://github.com/<owner>/<repo>/archive/<commit>.tar.gz`, top folder
  `<repo>-<commit>/`.
- Built with the CUDA flags (issue 28, docs/operations.md "The CUDA image"): the fork at edfd4c1 compiled and
  linked whole for sm_120 (as 120a) with kimik3's rendered cmake arguments and patches, natively on the H200's
  16 cores (tests/fixtures/h200/fork-build.txt: 476 steps, every library of the three binaries resolves, no
  kernel run there); mainline's pin itself has not been through a CUDA build (the demo, CI, the Docker-built CUDA
  images for 90 and 120 and the H200 proofs build b11434, a mainline tree after ad1de39).
"""

from __future__ import annotations

from kimik3_reconciler.model.pins import SourcePin

PINS: dict[str, SourcePin] = {
    "mainline": SourcePin(
        source="mainline",
        repository="ggml-org/llama.cpp",
        commit="ad1de39e0708e3ced9c71bb3c82d93a2c046a73f",
        date="2026-08-15",
        build_number=10448,
        vision=False,
        note="model: add Kimi-K3 text model (#26185); text only",
    ),
    "fork": SourcePin(
        source="fork",
        repository="unslothai/llama.cpp",
        commit="edfd4c1a3b7a653303a85257ddac2a1f3ce39a2f",
        date="2026-08-17",
        build_number=10473,
        vision=True,
        note="PR #70 head (kimi-k3-vision-only), unmerged; re-pin as it evolves",
    ),
}


def pin_for(source: str) -> SourcePin:
    """The pin of `source` ("fork" or "mainline"); KeyError for anything else."""
    return PINS[source]
