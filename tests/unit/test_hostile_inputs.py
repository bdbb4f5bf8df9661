"""Hostile input files (a review's held-back set): whatever the file, validate/plan answer exit 2 with the file
named, at once, without a traceback, and without reading more than a profile could be."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3_reconciler.cli import main
from kimik3_reconciler.cli.inputs import MAX_INPUT_BYTES
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.model.profile_source import MAX_PROFILE_CHARS, parse_profile

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "profiles" / "demo-cpu.yaml").read_text()


def _validate(path: str, tmp_path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--state-dir", str(tmp_path / "state"), "validate", path])
    return result.exit_code, result.output


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_an_endless_file_is_refused_after_a_bounded_read(tmp_path: Path) -> None:
    code, output = _validate("/dev/zero", tmp_path)  # before: read to the end -> MemoryError traceback
    assert code == 2 and "larger than 4 MiB" in output and "Traceback" not in output
    assert not (tmp_path / "state").exists()


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
