"""Step payloads and configs that unit tests build the same way: a local llama.cpp image build from a folder, and
the exporter's config for the profile `k3`. A test passes only what it is about."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.specs import ImageBuild

BUILD_ARGS = (("BUILD_IMAGE", "b:1"), ("RUNTIME_IMAGE", "r:1"), ("CMAKE_ARGS", "-DGGML_CUDA=OFF"))


def local_build(folder: Path, build_args: tuple[tuple[str, str], ...] = BUILD_ARGS, **options: object) -> ImageBuild:
    """The CPU build of kimi-k3-llamacpp:x (fingerprint fp1, mainline ad1de39) from `folder`'s Dockerfile.llamacpp
    and src.tar.gz, no patches; `options` as ImageBuild takes them (variant, preread)."""
    return ImageBuild(
        "kimi-k3-llamacpp:x",
        "fp1",
        "mainline",
        "ad1de39",
        str(folder / "Dockerfile.llamacpp"),
        str(folder / "src.tar.gz"),
        None,
        (),
        build_args,
        (("kimik3.image.fingerprint", "fp1"),),
        **options,  # type: ignore[arg-type]
    )


def exporter_config(**changes: object) -> ExporterConfig:
    """The exporter of profile k3 (its container k3) on 127.0.0.1:9100, reading the server at 127.0.0.1:8080;
    `changes` as ExporterConfig takes them."""
    fields: dict = {
        "profile": "k3",
        "labels": {},
        "bind": "127.0.0.1",
        "port": 9100,
        "container": "k3",
        "server_url": "http://127.0.0.1:8080",
    }
    return ExporterConfig(**{**fields, **changes})
