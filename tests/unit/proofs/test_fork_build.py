"""Issue 28's fork pin, compiled and linked whole on the lent H200 (tests/fixtures/h200/fork-build.txt, written by
tools/gpu_proof/run-fork-build.sh): unslothai/llama.cpp at edfd4c1 with kimik3's patches and the CMAKE_ARGS kimik3
renders for tools/cuda_image/rtx-pro-6000-fork.yaml (sm_120). The record is checked against what kimik3 renders
today, so a change of the fork pin, the patches or the cmake arguments shows up here as a record to renew."""

from __future__ import annotations

import re
from pathlib import Path

from kimik3_reconciler.engines.llamacpp.pins import PINS
from kimik3_reconciler.model.builtin_patches import BUILTIN_PATCHES

RECORD = (Path(__file__).parents[2] / "fixtures" / "h200" / "fork-build.txt").read_text()


def test_the_fork_pin_built_and_linked_whole() -> None:
    assert re.search(r"^build: rc 0, \d+ s$", RECORD, re.M)
    steps = re.search(r"^build_seconds=(\d+) steps=(\d+)$", RECORD, re.M)
    assert steps and int(steps.group(2)) > 400  # the whole tree, not the partial compile of 2026-12-03
    assert "Using CMAKE_CUDA_ARCHITECTURES=120a" in RECORD
    assert "version: 0.1.1-dev (build 10473, commit edfd4c1)" in RECORD
    assert PINS["fork"].commit.startswith("edfd4c1")


def test_every_library_of_the_three_binaries_resolves() -> None:
    found = dict(re.findall(r"^== ldd (\S+): \d+ libraries, unresolved: (\d+)$", RECORD, re.M))
    assert found == {"llama-server": "0", "llama-perplexity": "0", "ggml-rpc-server": "0"}
    assert "libmtmd.so.0 => /tmp/fork-build/bin/" in RECORD  # the vision library the fork exists for


def test_kimik3s_patches_applied_in_the_images_order_and_the_cubins_are_sm_120a() -> None:
    rendered = re.search(r"^rendered: kimi-k3-llamacpp:fork-edfd4c1 \S+ \[(.*)\]$", RECORD, re.M)
    assert rendered
    order = re.findall(r"'(\S+)'", rendered.group(1))
    assert re.findall(r"^applying (\S+)$", RECORD, re.M) == order
    cuda_patches = {p.file for p in BUILTIN_PATCHES if "cuda" in p.variants}
    assert {name.split("-kimik3-", 1)[1] for name in order} == cuda_patches  # kimik3's own, all of them
    assert "FAILED" not in RECORD
    cubins = re.search(r"^\s+(\d+) sm_120a", RECORD, re.M)
    assert cubins and int(cubins.group(1)) > 100
