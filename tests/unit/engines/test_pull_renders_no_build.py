"""A plan of an engine that pulls its image (vLLM, SGLang) renders no llama.cpp build (issue 37): before, every plan
rendered one (Dockerfile, patches, CMake flags: render_image_build) and the exporter's config carried its
fingerprint, for an image no step builds. Each path that read the build (the desired state, the GPU probe, the quant
gate, the exporter, a saved plan's basis) now asks the engine how its image is obtained first."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.observed import model_fact, observed
from support.shipped import pinned_text

import kimik3_reconciler.engines.llamacpp.image as llamacpp_image
from kimik3_reconciler.model.described_host import described_host
from kimik3_reconciler.model.facts import HostFacts, PulledImageFact, RemoteFile
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import ExporterRun, ImageBuild
from kimik3_reconciler.planning import plan, render_desired
from kimik3_reconciler.planning.basis import observed_basis

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30
B300 = {
    "gpus": [{"name": "NVIDIA B300 SXM6 AC", "count": 8, "memory_gib": 268}],
    "ram_gib": 2048,
    "driver": "580.95.05",
}
METRICS = "metrics: {port: 9465}\n"


def _host() -> HostFacts:
    facts = described_host(B300, "host.yaml")
    return HostFacts.model_validate({**facts.model_dump(), "physical_cores": 96, "docker_gpus": True})


def _refuse_to_render(profile, observed):  # noqa: ANN001, ANN202 - render_image_build's signature
    raise AssertionError(f"a llama.cpp build was rendered for engine {profile.engine}")


@pytest.mark.parametrize("shipped", ["vllm-tp8.yaml", "sglang-tp8.yaml"])
def test_a_pull_engines_plan_renders_no_llamacpp_build(shipped: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llamacpp_image, "render_image_build", _refuse_to_render)
    profile = parse_profile(pinned_text(ROOT / "profiles" / shipped) + METRICS, shipped).profile
    files = tuple(
        RemoteFile(path=f"model-{i:05d}-of-00004.safetensors", size=400 * GIB, sha256=str(i) * 64) for i in range(1, 5)
    ) + (RemoteFile(path="config.json", size=4096, sha256="c" * 64),)
    ref = profile.image.ref
    facts = observed(
        profile,
        host=_host(),
        model=model_fact(profile, quant="checkpoint", files=files),
        pulled=PulledImageFact(ref=ref, digest=ref.split("@")[1], pull_bytes=20 * GIB),
    )
    desired = render_desired(profile, facts)
    assert desired.build is None
    result = plan(profile, facts)
    assert not any(isinstance(step.spec, ImageBuild) for step in result.steps)
    exporter = [s.spec for s in result.steps if isinstance(s.spec, ExporterRun)]
    # the exporter reads smoke and quant gate records by a built image's fingerprint: a pulled image has none
    assert exporter and all(ExporterConfig.from_json(spec.config).image_fingerprint == "" for spec in exporter)
    assert observed_basis(profile, facts)  # a saved plan's basis is made without a build too
