"""Hostile input files (a review's held-back set): whatever the file, validate/plan answer exit 2 with the file
named, at once, without a traceback, and without reading more than a profile could be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3_reconciler.cli import main
from kimik3_reconciler.cli.inputs import MAX_INPUT_BYTES
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.model.profile_source import MAX_PROFILE_CHARS, parse_profile

ROOT = Path(__file__).resolve().parents[3]
DEMO = (ROOT / "profiles" / "demo-cpu.yaml").read_text()


def kimik3_run(tmp_path: Path, *args: str, **options: object) -> subprocess.CompletedProcess[str]:
    """`python -m kimik3_reconciler ARGS` in a process of its own (its real stdin and descriptors), its state in
    `tmp_path`; `options` as subprocess.run takes them (stdin, input, pass_fds)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KIMIK3_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run(  # type: ignore[call-overload]
        [sys.executable, "-m", "kimik3_reconciler", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
        **options,
    )


def demo_plan(tmp_path: Path):  # noqa: ANN201 - a SavedPlan
    """A saved plan of the demo profile (as `tmp_path/k3.yaml`) with no steps."""
    from kimik3_reconciler.model.plan_file import SavedPlan

    return SavedPlan(
        profile_source=str(tmp_path / "k3.yaml"),
        profile_text=DEMO,
        basis={},
        steps=(),
        created="2026-12-03T10:00:00+00:00",
    )


def _validate(path: str, tmp_path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--state-dir", str(tmp_path / "state"), "validate", path])
    return result.exit_code, result.output


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_an_endless_device_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    code, output = _validate("/dev/zero", tmp_path)  # before: read to the end -> MemoryError traceback
    assert code == 2 and output.startswith("/dev/zero: is a character device: kimik3 reads a profile")
    assert "Traceback" not in output and not (tmp_path / "state").exists()


def test_an_endless_stdin_is_refused_after_a_bounded_read(tmp_path: Path) -> None:
    with open("/dev/zero", "rb") as zeros:  # stdin is read as it is, but never past the limit
        run = kimik3_run(tmp_path, "validate", "/dev/stdin", stdin=zeros)
    assert run.returncode == 2 and run.stderr.startswith("/dev/stdin: larger than 4 MiB")


def test_a_fifo_without_a_writer_is_refused_at_once_naming_it(tmp_path: Path) -> None:
    fifo = tmp_path / "k3.yaml"
    os.mkfifo(fifo)
    for command in ("validate", "plan"):  # before: open() waited for a writer forever
        run = kimik3_run(tmp_path, command, str(fifo))
        assert run.returncode == 2, run.stderr
        assert f"{fifo}: is a FIFO (named pipe): kimik3 reads a profile or saved plan from a regular file" in run.stderr
        assert "Traceback" not in run.stderr
    assert not (tmp_path / "state").exists()


def test_a_profile_on_stdin_or_a_handed_over_descriptor_still_reads(tmp_path: Path) -> None:
    demo = ROOT / "profiles" / "demo-cpu.yaml"
    with open(demo, "rb") as profile:
        as_file = kimik3_run(tmp_path, "validate", "/dev/stdin", stdin=profile)
    piped = kimik3_run(tmp_path, "validate", "/dev/stdin", input=DEMO)
    read_end, write_end = os.pipe()  # bash's `validate <(cat k3.yaml)`: a pipe named /dev/fd/N
    os.write(write_end, DEMO.encode())
    os.close(write_end)
    try:
        substituted = kimik3_run(tmp_path, "validate", f"/dev/fd/{read_end}", pass_fds=(read_end,))
    finally:
        os.close(read_end)
    for run, name in ((as_file, "/dev/stdin"), (piped, "/dev/stdin"), (substituted, f"/dev/fd/{read_end}")):
        assert (run.returncode, run.stdout.strip()) == (0, f"{name}: ok"), run.stderr


def test_a_profile_padded_past_the_read_limit_is_refused_naming_the_file(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(DEMO + "".join(f"\nk{i}: {i}" for i in range(MAX_INPUT_BYTES // 8)))
    code, output = _validate(str(big), tmp_path)
    assert code == 2 and output.startswith(f"{big}: larger than 4 MiB")


def test_a_profile_of_many_keys_is_refused_at_once_not_parsed_for_minutes() -> None:
    text = DEMO + "".join(f"\nk{i}: {i}" for i in range(MAX_PROFILE_CHARS // 8))
    with pytest.raises(ProfileError) as caught:
        parse_profile(text, "many.yaml")  # before: ~0.5 ms per unknown key (minutes for 10 MB)
    (problem,) = caught.value.problems
    assert str(problem).startswith("many.yaml: ") and "a profile is a few KiB" in problem.message


def test_a_long_comment_under_the_limit_is_still_a_valid_profile() -> None:
    parse_profile(DEMO + "# " + "x" * (MAX_PROFILE_CHARS // 2) + "\n", "commented.yaml")


PROFILE_WITH_FILES = """apiVersion: kimik3/v1
name: k3
model: {repo: org/k3, revision: %s, quant: UD-Q2_K_XL}
build:
  archive: src.tar.gz
  patches:
    - patches/ok.patch
    - patches/missing.patch
gpus: [0]
serve:
  api_key_file: keys/api-key
""" % ("ab" * 20)


@pytest.mark.parametrize(
    ("missing", "line", "field"),
    [
        ("patches/missing.patch", 8, "build.patches[1]"),
        ("src.tar.gz", 5, "build.archive"),
        ("keys/api-key", 11, "serve.api_key_file"),
    ],
)
def test_a_file_the_profile_names_that_is_missing_is_refused_at_the_line_that_names_it(
    tmp_path: Path, missing: str, line: int, field: str
) -> None:
    """Review: plan's refusal of a missing patch/archive/key file named the field but not the profile's file:line
    (validate cannot see files; the observer that can sees no profile file)."""
    from support.fakes.state import MemoryState

    from kimik3_reconciler.errors import InputError
    from kimik3_reconciler.observe.local_inputs import collect_inputs
    from kimik3_reconciler.orchestrator import located

    for name in ("src.tar.gz", "patches/ok.patch", "patches/missing.patch", "keys/api-key", "Dockerfile"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"x {name}")  # distinct: two patches with one content are refused
    (tmp_path / missing).unlink()
    loaded = parse_profile(PROFILE_WITH_FILES, "site/k3.yaml")
    with pytest.raises(InputError) as refused, located(loaded):
        collect_inputs(loaded.profile, tmp_path, tmp_path / "Dockerfile", MemoryState())
    assert refused.value.exit_code == 2
    assert str(refused.value).endswith(f"\n  at site/k3.yaml:{line}: {field}")


def test_a_refusal_without_fields_gets_the_lines_of_the_fields_its_text_names() -> None:
    from kimik3_reconciler.errors import PlanError
    from kimik3_reconciler.orchestrator import located

    loaded = parse_profile(PROFILE_WITH_FILES, "k3.yaml")
    with pytest.raises(PlanError) as refused, located(loaded):
        raise PlanError(
            "the host gate refuses this profile:\n  - gpus: 0 not on this host\n  - serve.api_key_file "
            "x; serve.spec_draft.device unset; the model and gpus: none are prose"
        )
    assert str(refused.value).endswith("\n  at k3.yaml:9: gpus\n  at k3.yaml:11: serve.api_key_file")
    from kimik3_reconciler.errors import HubError

    with pytest.raises(HubError) as hub_refused, located(loaded):  # exit 6 still, with the line of the quant
        raise HubError("org/k3@abab:UD-Q9: path not found at this revision (check model.quant / model.mmproj)")
    assert hub_refused.value.exit_code == 6
    assert str(hub_refused.value).endswith("(check model.quant / model.mmproj)\n  at k3.yaml:3: model.quant")


def test_hub_errors_never_print_the_credentials_of_a_hub_url() -> None:
    """Review: `plan` printed `hub http://user:pass@127.0.0.1:18080 not reachable`. A profile cannot hold such a URL
    any more (no-secrets); HF_ENDPOINT still can, so the adapters mask what they print."""
    import socket

    from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub
    from kimik3_reconciler.errors import HubError
    from kimik3_reconciler.model.hub_endpoint import masked, shown

    assert shown("https://u:pw@hub.example.com/x") == "https://***@hub.example.com/x"
    assert shown("https://hub.example.com") == "https://hub.example.com"
    assert (
        masked("404 for url: https://u:pw@hub.example.com/api", "https://u:pw@hub.example.com")
        == "404 for url: https://***@hub.example.com/api"
    )
    with socket.socket() as closed:  # a port nothing listens on: connection refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(HubError) as refused:
        HuggingFaceHub().list_files("org/k3", "ab" * 20, ["Q"], f"http://user:s3cret@127.0.0.1:{port}")
    assert "s3cret" not in str(refused.value) and f"http://***@127.0.0.1:{port}" in str(refused.value)


def test_plain_scalars_are_typed_by_yaml_1_2_not_guessed_by_yaml_1_1() -> None:
    text = DEMO.replace("port: 18181", "port: 0100").replace("parallel: 2", "parallel: 2\n  env: {A: on, B: no}")
    text = text.replace("d3e0c0d2d3e0c0d2d3e0c0d2d3e0c0d2d3e0c0d2", "1234567890123456789012345678901234567e10")
    serve = parse_profile(text, "demo.yaml").profile.serve
    assert serve.port == 100 and serve.env == {"A": "on", "B": "no"}  # YAML 1.1: 64, True, False
    assert parse_profile(text, "demo.yaml").profile.model.revision == "1234567890123456789012345678901234567e10"


def test_status_lists_this_profiles_images_not_every_kimik3_image_on_the_host(tmp_path: Path, monkeypatch) -> None:
    """Review: `kimik3 status profiles/hybrid-q2.yaml` on the demo host said `images kimi-k3-llamacpp:mainline-...-cpu`,
    another profile's image. Status shows the image this profile wants, the one its container runs, its older
    builds; an image of another profile with another fingerprint is not listed."""
    from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

    import kimik3_reconciler.adapters as adapters
    from kimik3_reconciler.orchestrator import Orchestrator
    from kimik3_reconciler.steps.report import NullReporter

    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    hub = FakeHub(
        "org/k3",
        FAKE_REVISION,
        {
            "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf": b"x" * 64,
            "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf": b"y" * 64,
        },
        tmp_path / "hub",
    )
    ports, docker = fake_ports(hub)
    orchestrator = Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    orchestrator.apply(parse_profile(FAKE_PROFILE, "test.yaml"))
    docker.images["sha256:other"] = {
        "Id": "sha256:other",
        "RepoTags": ["kimi-k3-llamacpp:other-1234567-cpu"],
        "Config": {"Labels": {"kimik3.image.fingerprint": "0ther", "kimik3.profile": "x"}},
    }
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: orchestrator.ports)
    status = ["--dockerfile", str(tmp_path / "Dockerfile.llamacpp"), "status"]
    (tmp_path / "p.yaml").write_text(FAKE_PROFILE)
    shown = CliRunner().invoke(main, [*status, str(tmp_path / "p.yaml")])
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.output.splitlines() if x.startswith("images"))
    assert "(current, in use)" in line and "other-1234567" not in line
    (tmp_path / "q.yaml").write_text(FAKE_PROFILE.replace("name: k3-test", "name: k3-other"))
    shown = CliRunner().invoke(main, [*status, str(tmp_path / "q.yaml")])
    line = next(x for x in shown.output.splitlines() if x.startswith("images"))
    assert "other-1234567" not in line


def test_plan_out_replaces_only_a_new_file_or_an_older_saved_plan(tmp_path: Path) -> None:
    """Review: `plan FILE -out /dev/full` renamed the plan over the device node (as root), and `-out FILE` would have
    replaced the profile itself. Only a new path or an older saved plan is written."""
    from kimik3_reconciler.cli.inputs import write_plan
    from kimik3_reconciler.errors import InputError

    saved = demo_plan(tmp_path)
    profile = tmp_path / "k3.yaml"
    profile.write_text(DEMO)
    with pytest.raises(InputError, match="exists and is not a kimik3 saved plan"):
        write_plan(str(profile), saved)
    assert profile.read_text() == DEMO
    (tmp_path / "link").symlink_to(profile)
    with pytest.raises(InputError, match="link is a symlink: refusing to replace it"):
        write_plan(str(tmp_path / "link"), saved)
    write_plan(str(tmp_path / "old.plan"), saved)
    (tmp_path / "to-a-plan").symlink_to(tmp_path / "old.plan")  # even to a saved plan: said as what it is
    with pytest.raises(InputError, match="to-a-plan is a symlink"):
        write_plan(str(tmp_path / "to-a-plan"), saved)
    write_plan(str(tmp_path / "k3.plan"), saved)  # new
    write_plan(str(tmp_path / "k3.plan"), saved)  # an older saved plan
    assert (tmp_path / "k3.plan").read_text().lstrip().startswith("{")


def test_a_plan_that_cannot_be_written_is_exit_8_naming_the_path_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch
) -> None:
    """Adversary review: `-out` into a missing folder or onto a full disk said exit 2 (invalid input) and a failed
    rename left `.k3.plan.kimik3-tmp` behind; the README's exit 8 is for a local path that cannot be used."""
    import errno

    from kimik3_reconciler.cli.inputs import write_plan
    from kimik3_reconciler.errors import LocalFileError

    saved = demo_plan(tmp_path)
    with pytest.raises(LocalFileError) as missing:
        write_plan(str(tmp_path / "no-such-dir" / "k3.plan"), saved)
    assert missing.value.exit_code == 8 and str(tmp_path / "no-such-dir") in str(missing.value)

    def full_disk(source: str, target: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(LocalFileError, match="k3.plan"):
        write_plan(str(tmp_path / "k3.plan"), saved)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_plan_out_never_writes_through_a_symlink_planted_at_a_temp_name(tmp_path: Path) -> None:
    """The host lock's class (held-back review): `-out` wrote `.NAME.kimik3-tmp`, a predictable name, following a
    symlink there (in a shared /tmp: any user's). Now a fresh O_EXCL temp file."""
    from kimik3_reconciler.cli.inputs import write_plan

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / ".k3.plan.kimik3-tmp").symlink_to(victim)
    saved = demo_plan(tmp_path)
    write_plan(str(tmp_path / "k3.plan"), saved)
    assert victim.read_text() == "precious\n" and (tmp_path / "k3.plan").read_text().startswith("{")
    assert (tmp_path / "k3.plan").stat().st_mode & 0o777 == 0o644
