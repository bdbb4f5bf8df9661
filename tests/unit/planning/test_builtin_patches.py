"""kimik3's own llama.cpp patches (issue 15: the parallel-pin patch): in the CUDA image's build context and
fingerprint, never in the CPU image's; named in the plan; applying to the b11434 archive the demo builds."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from support.observed import local_inputs, observed
from support.realparts import DEMO_DIR

from kimik3_reconciler.engines.llamacpp.image import builtin_summary, image_inputs, render_image_build
from kimik3_reconciler.model.builtin_patches import BUILTIN_PATCHES, builtin_patches_for
from kimik3_reconciler.model.facts import PatchFact
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.local_inputs import PATCH_DIR, builtin_patch_facts, sha256_file
from kimik3_reconciler.planning.basis import observed_basis

ROOT = Path(__file__).resolve().parents[3]
PIN = PATCH_DIR / "parallel-pinned-host-buffer.patch"
CUDA_FILE = "ggml/src/ggml-cuda/ggml-cuda.cu"

PROFILE = """apiVersion: kimik3/v1
name: kimi-k3
model: {{repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: UD-Q2_K_XL}}
build: {{source: mainline, variant: {variant}{extra}}}
gpus: {gpus}
"""


def profile(variant: str = "cuda", extra: str = ""):
    text = PROFILE.format(variant=variant, extra=extra, gpus="none" if variant == "cpu" else "all")
    return parse_profile(text, "p.yaml").profile


def test_every_builtin_patch_file_is_shipped_with_the_package() -> None:
    for patch in BUILTIN_PATCHES:
        assert (PATCH_DIR / patch.file).is_file(), patch.file
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"patches/*.patch"' in pyproject  # package data: an installed kimik3 has the files it hashes


def test_cuda_image_gets_the_patch_in_its_context_and_fingerprint() -> None:
    p = profile("cuda")
    obs = observed(p, inputs=local_inputs(p))
    build = render_image_build(p, obs)
    assert build.patches == (
        ("00-kimik3-parallel-pinned-host-buffer.patch", str(PIN)),
        ("01-kimik3-parallel-host-read.patch", str(PATCH_DIR / "parallel-host-read.patch")),
    )
    assert image_inputs(p, obs)["build.builtin_patches"] == [
        f"parallel-pinned-host-buffer.patch@{sha256_file(PIN)[:12]}",
        f"parallel-host-read.patch@{sha256_file(PATCH_DIR / 'parallel-host-read.patch')[:12]}",
    ]
    # other bytes in the patch file (an edited patch) move the image fingerprint: the image is rebuilt
    edited = observed(
        p, inputs=local_inputs(p, builtin_patches=(PatchFact(name=PIN.name, path=str(PIN), sha256="f" * 64),))
    )
    assert render_image_build(p, edited).fingerprint != build.fingerprint


def test_cpu_image_gets_no_patch_and_keeps_its_fingerprint() -> None:
    p = profile("cpu")
    assert builtin_patch_facts(p) == ()
    obs = observed(p, inputs=local_inputs(p))
    build = render_image_build(p, obs)
    assert build.patches == ()
    assert "build.builtin_patches" not in image_inputs(p, obs)  # the inputs (so the fingerprint) as before
    assert builtin_summary(obs) == ""


def test_user_patches_apply_after_kimik3s_own() -> None:
    p = profile("cuda", ", patches: [fix.patch]")
    obs = observed(p, inputs=local_inputs(p))
    names = [name for name, _ in render_image_build(p, obs).patches]
    assert names == [
        "00-kimik3-parallel-pinned-host-buffer.patch",
        "01-kimik3-parallel-host-read.patch",
        "02-fix.patch",
    ]  # Dockerfile: name order


def test_builtin_patches_empty_builds_without_and_saved_plans_see_the_patch() -> None:
    p = profile("cuda", ", builtin_patches: []")
    assert builtin_patch_facts(p) == ()
    obs = observed(p, inputs=local_inputs(p))
    assert render_image_build(p, obs).patches == ()
    default = profile("cuda")
    basis = observed_basis(default, observed(default, inputs=local_inputs(default)))
    assert basis["input builtin patches"].startswith("parallel-pinned-host-buffer.patch ")
    assert builtin_patches_for("cuda", ["parallel-pin", "parallel-host-read"]) == builtin_patches_for("cuda", None)


@pytest.mark.skipif(
    not (DEMO_DIR / "llama.cpp-b11434.tar.gz").is_file() or shutil.which("patch") is None,
    reason="the b11434 archive (scripts/demo.sh fetches it) or patch(1) is absent",
)
def test_the_patch_applies_to_the_b11434_archive(tmp_path: Path) -> None:
    _applies_cleanly_to_b11434(tmp_path, PIN, CUDA_FILE)


def _applies_cleanly_to_b11434(tree: Path, patch: Path, name: str) -> None:
    """`patch` applies to `name` of the demo's b11434 archive with no fuzz and no offset."""
    with tarfile.open(DEMO_DIR / "llama.cpp-b11434.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/" + name))
        data = tar.extractfile(member).read()
    (tree / name).parent.mkdir(parents=True)
    (tree / name).write_bytes(data)
    done = _dry_run(tree, patch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout and "offset" not in done.stdout, done.stdout  # clean: no fuzz, no offset


def _dry_run(tree: Path, patch: Path) -> subprocess.CompletedProcess:
    # exactly as Dockerfile.llamacpp applies it (without --dry-run there)
    return subprocess.run(
        ["patch", "-p1", "--forward", "--batch", "--dry-run", "-i", str(patch)],
        check=False,
        cwd=tree,
        capture_output=True,
        text=True,
    )


# --- parallel-host-read (issue 15: the warm hybrid load's one-thread copy); a CUDA default since measured on the
# H200 host (tests/unit/proofs/test_read_patch.py), opt-in for CPU builds

READ = PATCH_DIR / "parallel-host-read.patch"
LOADER_FILE = "src/llama-model-loader.cpp"
PINS_LOADER = (
    ROOT / "tests" / "fixtures" / "llama_pins" / "vendor" / "llama-model-loader.cpp"
)  # both pins' copy (README)


def test_a_patch_is_a_default_only_for_variants_it_applies_to() -> None:
    for p in BUILTIN_PATCHES:
        assert set(p.default_for) <= set(p.variants), p.name


def test_opt_in_patches_come_only_when_named_so_the_cpu_image_does_not_move() -> None:
    by_name = {p.name: p for p in BUILTIN_PATCHES}
    assert by_name["parallel-pin"].default_for == ("cuda",)
    assert by_name["parallel-host-read"].default_for == ("cuda",)  # measured on the H200; CPU: opt-in
    assert [p.name for p in builtin_patches_for("cuda", None)] == ["parallel-pin", "parallel-host-read"]
    assert builtin_patches_for("cpu", None) == ()
    # named: in BUILTIN_PATCHES order (the apply order), whatever order the profile lists them in
    assert [p.name for p in builtin_patches_for("cuda", ["parallel-host-read", "parallel-pin"])] == [
        "parallel-pin",
        "parallel-host-read",
    ]
    assert [p.name for p in builtin_patches_for("cuda", ["parallel-host-read"])] == ["parallel-host-read"]
    assert [p.name for p in builtin_patches_for("cpu", ["parallel-host-read"])] == ["parallel-host-read"]
    assert builtin_patches_for("cpu", ["parallel-pin"]) == ()  # CUDA only (profile_rules refuses the name)


def test_cpu_image_that_names_the_read_patch_gets_it_and_a_fingerprint_of_its_own() -> None:
    default = profile("cpu")
    chosen = profile("cpu", ", builtin_patches: [parallel-host-read]")
    obs = observed(chosen, inputs=local_inputs(chosen))
    build = render_image_build(chosen, obs)
    assert build.patches == (("00-kimik3-parallel-host-read.patch", str(READ)),)
    assert image_inputs(chosen, obs)["build.builtin_patches"] == [f"parallel-host-read.patch@{sha256_file(READ)[:12]}"]
    assert build.fingerprint != render_image_build(default, observed(default, inputs=local_inputs(default))).fingerprint
    assert builtin_summary(obs).startswith("kimik3 patches: parallel-host-read (parallel-host-read.patch ")


def test_cuda_image_with_both_applies_the_pin_patch_first() -> None:
    p = profile("cuda", ", builtin_patches: [parallel-host-read, parallel-pin]")
    obs = observed(p, inputs=local_inputs(p))
    assert [name for name, _ in render_image_build(p, obs).patches] == [
        "00-kimik3-parallel-pinned-host-buffer.patch",
        "01-kimik3-parallel-host-read.patch",
    ]


@pytest.mark.parametrize(
    ("variant", "extra", "path", "needles"),
    [
        pytest.param(
            "cuda",
            "",
            CUDA_FILE,
            # the documented switches exist in the code, and the existing opt-out is still honoured
            (
                'getenv("KIMIK3_PARALLEL_PIN")',
                'getenv("KIMIK3_PARALLEL_PIN_HUGEPAGE")',
                'getenv("GGML_CUDA_NO_PINNED")',
                "cudaHostRegister(",
                "cudaHostUnregister(",
                "munmap(",
                "!defined(GGML_USE_HIP) && !defined(GGML_USE_MUSA)",
            ),
            id="pin: the cuda backend, its switches",
        ),
        pytest.param(
            "cpu",
            ", builtin_patches: [parallel-host-read]",
            LOADER_FILE,
            (
                'getenv("KIMIK3_PARALLEL_READ")',
                'getenv("KIMIK3_PARALLEL_READ_THREADS")',
                "pread(",
                "errno == EINTR",
                "file.has_direct_io()",
                "file.read_alignment() > 1",
                "#ifndef _WIN32",
                '"unexpectedly reached end of file"',
                "kimik3_reader.finish(",
                "ggml_validate_row_data(",
                "~kimik3_parallel_reader() { stop_and_join(); }",
            ),
            id="read: the loader, the stock paths kept",
        ),
    ],
)
def test_a_builtin_patch_changes_only_its_file_adds_only_and_reads_its_switches(
    variant: str, extra: str, path: str, needles: tuple[str, ...]
) -> None:
    facts = builtin_patch_facts(profile(variant, extra))
    assert [f.path for f in facts[0].files] == [path]
    added = "\n".join(facts[0].files[0].added)
    for needle in needles:
        assert needle in added, needle
    # additions only: the stock paths stay (pin: cudaMallocHost as the fallback; read: read_raw for dio files,
    # KIMIK3_PARALLEL_READ=0 and Windows)
    assert facts[0].files[0].removed == 0


@pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) is absent")
def test_the_read_patch_applies_to_both_pins(tmp_path: Path) -> None:
    (tmp_path / LOADER_FILE).parent.mkdir(parents=True)
    shutil.copy(PINS_LOADER, tmp_path / LOADER_FILE)
    done = _dry_run(tmp_path, READ)
    # the pins' load_all_data sits ~90 lines earlier than b11434's: offsets, never fuzz
    assert done.returncode == 0 and "FAILED" not in done.stdout and "fuzz" not in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(
    not (DEMO_DIR / "llama.cpp-b11434.tar.gz").is_file() or shutil.which("patch") is None,
    reason="the b11434 archive (scripts/demo.sh fetches it) or patch(1) is absent",
)
def test_the_read_patch_applies_to_the_b11434_archive(tmp_path: Path) -> None:
    _applies_cleanly_to_b11434(tmp_path, READ, LOADER_FILE)


@pytest.mark.parametrize("copy_of", ["mine.patch", "parallel-host-read"])
def test_a_patch_listed_twice_by_content_is_refused_before_the_build(tmp_path: Path, copy_of: str) -> None:
    """`patch --forward` fails on a change already applied: the same patch twice in build.patches, or a copy of a
    built-in one the variant already gets, failed the image build minutes in ("PATCH FAILED"). Now exit 2 at
    observation, naming the second entry and what it repeats."""
    from support.fakes import MemoryState

    from kimik3_reconciler.errors import InputError
    from kimik3_reconciler.observe.local_inputs import collect_inputs

    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "mine.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    shutil.copy(PATCH_DIR / "parallel-host-read.patch", tmp_path / "copy.patch")
    second = "copy.patch" if copy_of == "parallel-host-read" else "./mine.patch"
    text = PROFILE.format(
        variant="cpu", gpus="none", extra=f", builtin_patches: [parallel-host-read], patches: [mine.patch, {second}]"
    )
    with pytest.raises(InputError) as refused:
        collect_inputs(parse_profile(text, "k3.yaml").profile, tmp_path, tmp_path / "Dockerfile", MemoryState())
    said = str(refused.value)
    assert "build.patches[1]" in said and "applied twice" in said
    assert (
        "built-in parallel-host-read" if copy_of == "parallel-host-read" else "build.patches[0] (mine.patch)"
    ) in said
