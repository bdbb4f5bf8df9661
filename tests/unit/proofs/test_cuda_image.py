"""The Docker-built CUDA image served on the H200 (issue 28): tools/gpu_proof/run-cuda-image.sh, folded by
tools/cuda_image/fold.py into tests/fixtures/h200/cuda-image-h200.json. The /app that Dockerfile.llamacpp built
on the CPU dev machine (offline CUDA bases, kimik3's patches) against the native build of the same source,
patches and cmake arguments, both started with kimik3's rendered argv: tokens at temperature 0 identical, decode
tok/s of the image within the spread the two builds show over their own loads. Skips until the run lands."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "h200" / "cuda-image-h200.json"
sys.path.insert(0, str(ROOT / "tools" / "cuda_image"))


@pytest.fixture(scope="module")
def proof() -> dict:
    if not FIXTURE.exists():
        pytest.skip(
            "the H200 run of the CUDA image has not landed yet: tools/gpu_proof/run-cuda-image.sh, "
            "then tools/cuda_image/fold.py (docs/operations.md, 'The CUDA image')"
        )
    return json.loads(FIXTURE.read_text())


def test_the_summary_is_what_fold_computes_from_the_loads(proof: dict) -> None:
    from fold import summarize

    assert proof["summary"] == summarize(proof["samples"])


def test_every_load_served_and_both_placements_have_three_loads_a_build(proof: dict) -> None:
    assert [s for s in proof["samples"] if s.get("error")] == []
    for placement in ("gpu", "hybrid"):
        summary = proof["summary"][placement]
        assert summary["complete"] and min(summary["loads"].values()) >= 3, summary


def test_the_image_generates_the_native_builds_tokens(proof: dict) -> None:
    for placement, summary in proof["summary"].items():
        assert summary["tokens_identical"], placement
        # per placement: all-GPU and hybrid compute the experts on different devices, their answers may differ
        tokens = {json.dumps(s["tokens"]) for s in proof["samples"] if s["placement"] == placement}
        assert len(tokens) == 1 and len(json.loads(tokens.pop())) >= 64, placement


def test_the_images_decode_speed_is_within_the_measured_spread(proof: dict) -> None:
    for placement, summary in proof["summary"].items():
        assert abs(summary["decode_ratio_image_native"] - 1) <= summary["decode_spread"], (placement, summary)


def test_each_build_ran_its_own_libraries_and_the_drivers_libcuda(proof: dict) -> None:
    for sample in proof["samples"]:
        mapped = sample["mapped"]
        where = "/tmp/cuda-app/app/" if sample["build"] == "image" else "/tmp/build-image-native/bin/"
        assert mapped["libggml-cuda"].startswith(where), sample["build"]
        assert "/tmp/cuda-app" not in mapped["libcuda"] and "stubs" not in mapped["libcuda"]
    image = [s["mapped"] for s in proof["samples"] if s["build"] == "image"]
    assert len({(m["libcublas"], m["libcudart"]) for m in image}) == 1  # the ones recorded in pip_libs / ldd


def test_the_image_was_built_with_what_kimik3_renders_on_the_h200(proof: dict) -> None:
    # the image's CMAKE_ARGS (rendered on the CPU dev machine from tools/cuda_image/h200-cuda-image.yaml) are the
    # ones kimik3 renders on the H200 itself for tools/gpu_proof/h200-tiny.yaml (cpu_features: auto)
    assert proof["cmake_args_image"] == proof["cmake_args_rendered_here"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in proof["cmake_args_image"]
    assert proof["image"]["patches"] == [
        "00-kimik3-parallel-pinned-host-buffer.patch",
        "01-kimik3-parallel-host-read.patch",
    ]


def test_fold_judges_tokens_and_decode_per_placement() -> None:
    # runs before the fixture exists: what the fold computes from loads, including a failed one and a mismatch
    from fold import summarize

    def load(placement: str, build: str, decode: float, tokens: list[int], error: str | None = None) -> dict:
        return {
            "placement": placement,
            "build": build,
            "decode_tps": decode,
            "prompt_tps": 2 * decode,
            "tokens": tokens,
            **({"error": error} if error else {}),
        }

    samples = [
        load("gpu", "native", 100.0, [1, 2]),
        load("gpu", "image", 98.0, [1, 2]),
        load("gpu", "native", 104.0, [1, 2]),
        load("gpu", "image", 99.0, [1, 2]),
        load("gpu", "image", 0.0, [], error="exited 1"),
        load("hybrid", "native", 50.0, [1, 2]),
        load("hybrid", "image", 50.0, [1, 3]),
        load("both", "native", 1.0, [1]),
    ]
    summary = summarize(samples)
    gpu = summary["gpu"]
    assert gpu["loads"] == {"native": 2, "image": 2} and gpu["tokens_identical"]  # the failed load is left out
    assert gpu["decode_median_tps"] == {"native": 102.0, "image": 98.5}
    assert gpu["decode_ratio_image_native"] == round(98.5 / 102.0, 4)
    assert gpu["decode_spread"] == round(4 / 102.0, 4)  # native's (104 - 100) / 102 is the larger
    assert not summary["hybrid"]["tokens_identical"]
    assert summary["both"] == {"complete": False, "loads": {"native": 1, "image": 0}}
