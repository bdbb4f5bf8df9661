"""Installing kimik3 where it runs, exactly as README "Install" and docs/first-run.md say: `pipx install` of a fresh
copy of the repository into a pipx home of its own (PIPX_HOME, PIPX_BIN_DIR: /opt/pipx and /usr/local/bin on a host;
temp folders here), then the installed `kimik3` answers --help naming the engines, validates the shipped profiles,
explains a rule, judges a described 8-GPU host, and finds the files it builds from (Dockerfile.llamacpp, its
patches) inside the installed package. The wheel built from the repository carries the same files. ~1-2 minutes
(pipx makes a venv and installs the dependencies from the package index)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fresh_copy(target: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, not ignored): no .venv, no build outputs."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the kimik3 command pipx installed, the pipx venv's python, the copy it was installed from)."""
    if shutil.which("pipx") is None:
        pytest.fail(
            "pipx is not installed: scripts/test.sh installs it (apt-get install pipx), as the README's "
            "install does on a host"
        )
    work = tmp_path_factory.mktemp("install")
    source = _fresh_copy(work / "kimik3")
    env = {**os.environ, "PIPX_HOME": str(work / "pipx"), "PIPX_BIN_DIR": str(work / "bin")}
    done = subprocess.run(["pipx", "install", str(source)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return work / "bin" / "kimik3", work / "pipx" / "venvs" / "kimik3-reconciler" / "bin" / "python", source


def test_the_docs_give_the_command_tested_here() -> None:
    command = "PIPX_HOME=/opt/pipx PIPX_BIN_DIR=/usr/local/bin pipx install "
    assert command in (ROOT / "README.md").read_text()
    assert command in (ROOT / "docs" / "first-run.md").read_text()


def _kimik3(installed: tuple[Path, Path, Path], *args: str) -> subprocess.CompletedProcess:
    command, _, source = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMIK3_", "VIRTUAL_ENV"))}
    return subprocess.run(
        [str(command), *args],
        cwd=source,
        env={**env, "HOME": str(source.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_installed_kimik3_answers_and_validates(installed: tuple[Path, Path, Path]) -> None:
    helped = _kimik3(installed, "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert all(engine in text for engine in ("llama.cpp", "vLLM", "SGLang"))
    assert all(f" {name} " in text for name in ("plan", "apply", "pin", "routes", "validate"))
    profiles = sorted(str(p.relative_to(installed[2])) for p in (installed[2] / "profiles").glob("*.yaml"))
    validated = _kimik3(installed, "validate", *profiles)
    assert validated.returncode == 0, validated.stderr
    said = validated.stdout.splitlines()  # a fleet file says what it holds: "ok (fleet of 3 hosts)"
    assert len(said) == len(profiles) and all(
        line in (f"{p}: ok", f"{p}: ok (fleet of 3 hosts)") for line, p in zip(said, profiles)
    ), said
    explained = _kimik3(installed, "explain", "numa-balancing")
    assert explained.returncode == 0 and "kimik3_reconciler.planning.host_gate" in explained.stdout
    routes = _kimik3(
        installed, "routes", "--host-facts", "tests/fixtures/host/described-b300.yaml", "profiles/vllm-tp8.yaml"
    )
    assert routes.returncode == 0 and "8x NVIDIA B300" in routes.stdout


def test_the_installed_package_holds_what_it_builds_from(installed: tuple[Path, Path, Path]) -> None:
    _, python, _ = installed
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import kimik3_reconciler, pathlib; print(pathlib.Path(kimik3_reconciler.__file__).parent)",
        ],
        cwd=python.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    package = Path(where)
    assert ".venv" not in package.parts and "site-packages" in package.parts  # the pipx venv's copy, not the tree
    assert (package / "Dockerfile.llamacpp").read_text() == (
        ROOT / "kimik3_reconciler" / "Dockerfile.llamacpp"
    ).read_text()
    shipped = {p.name for p in (ROOT / "kimik3_reconciler" / "patches").glob("*.patch")}
    assert shipped and {p.name for p in (package / "patches").glob("*.patch")} == shipped
    assert (package / "gate_text.txt").is_file()


def test_the_wheel_carries_the_same_files(tmp_path: Path) -> None:
    source = _fresh_copy(tmp_path / "kimik3")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = (tmp_path / "dist").glob("kimik3_reconciler-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kimik3_reconciler/Dockerfile.llamacpp", "kimik3_reconciler/gate_text.txt"} <= names
    assert any(n.startswith("kimik3_reconciler/patches/") and n.endswith(".patch") for n in names)
    assert not any(n.startswith(("kimik3_demo/", "tests/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "kimik3 = kimik3_reconciler.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
