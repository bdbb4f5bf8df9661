"""The driver floor and the CUDA-architecture coverage, table by table (engines/llamacpp/host_compat.py)."""

from __future__ import annotations

import pytest

from kimik3_reconciler.engines.llamacpp.host_compat import (
    arch_coverage,
    best_coverage,
    driver_floor,
    image_cuda_version,
)
from kimik3_reconciler.model.driver import driver_text, version

H200, RTX_PRO_6000, B200, RTX_4090 = (9, 0), (12, 0), (10, 0), (8, 9)


@pytest.mark.parametrize(
    ("ref", "env", "expected"),
    [
        ("nvidia/cuda:13.0.0-runtime-ubuntu24.04", None, (13, 0, 0)),
        ("nvidia/cuda:12.8.1-devel-ubuntu24.04", None, (12, 8, 1)),
        ("docker.io/nvidia/cuda:13.0.1-runtime-ubuntu24.04@sha256:" + "a" * 64, None, (13, 0, 1)),
        ("registry:5000/nvidia/cuda:12.9-runtime", None, (12, 9, 0)),
        ("registry:5000/base", None, None),  # the port is not a tag
        ("kimik3-test/debian-build:bookworm", None, None),
        ("my/cuda-base:latest", {"CUDA_VERSION": "12.6.3"}, (12, 6, 3)),  # the image's env, when inspected
        ("nvidia/cuda@sha256:" + "b" * 64, None, None),
    ],
)
def test_the_cuda_version_of_a_base_image(ref: str, env: dict | None, expected: tuple | None) -> None:
    assert image_cuda_version(ref, env) == expected


@pytest.mark.parametrize(
    ("cuda", "floor"),
    [
        ((13, 0, 0), "580.65.06"),  # the default base images (seed 001: R580+)
        ((13, 0, 2), "580.95.05"),
        ((13, 2, 0), "590.44.01"),  # newer than the table: at least its newest row
        ((12, 8, 1), "570.124.06"),
        ((12, 8, 0), "570.26"),
        ((12, 4, 1), "570"),  # below seed 000's floor: 570 stands
        (None, "570"),
    ],
)
def test_the_driver_floor_of_a_cuda_version(cuda: tuple | None, floor: str) -> None:
    assert driver_text(driver_floor(cuda)[0]) == floor


def test_driver_versions_compare_as_numbers() -> None:
    assert version("580.159.04") > version("580.65.06") > version("575.57.08")
    assert version("570.26") < version("570.124.06") and version("") == ()


@pytest.mark.parametrize(
    ("entry", "gpu", "coverage"),
    [
        ("120", RTX_PRO_6000, "sass"),  # llama.cpp builds 120a: the RTX PRO 6000 itself
        ("120", H200, None),  # ...and nothing an H200 runs: the refusal of issue 14
        ("120-real", H200, None),
        ("120-virtual", RTX_PRO_6000, "sass"),  # rewritten to 120a too
        ("90", H200, "sass"),
        ("90", RTX_PRO_6000, "ptx"),  # compute_90 PTX, JIT-compiled on a newer GPU
        ("90-real", RTX_PRO_6000, None),  # SASS runs within its major only
        ("90-virtual", H200, "ptx"),
        ("90a", H200, "sass"),
        ("90a", RTX_PRO_6000, None),  # arch-specific: never forward
        ("90a-real", H200, "sass"),
        ("100f", (10, 3), "sass"),  # family-specific: 10.x with x >= 0
        ("100f", RTX_PRO_6000, None),
        ("100", B200, "sass"),
        ("86-real", RTX_4090, "sass"),  # 8.6 SASS runs on 8.9
        ("89", (8, 6), None),  # never backwards
        ("80", H200, "ptx"),
        ("all", H200, "sass"),
        ("all-major", RTX_4090, "sass"),
        ("native", H200, "sass"),
        ("sm_90", H200, None),  # not a CMake form
    ],
)
def test_one_architecture_entry(entry: str, gpu: tuple[int, int], coverage: str | None) -> None:
    assert arch_coverage(entry, gpu) == coverage


def test_the_best_entry_wins() -> None:
    assert best_coverage(["120"], H200) is None
    assert best_coverage(["80", "120"], H200) == "ptx"
    assert best_coverage(["80", "90", "120"], H200) == "sass"
