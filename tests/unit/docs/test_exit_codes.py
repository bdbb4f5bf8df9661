"""One table of exit codes: errors.py's docstring, `kimik3 --help`, the README and the error classes agree."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3_reconciler import errors
from kimik3_reconciler.cli import CHANGES_PENDING, EXIT_CODES, main

README = Path(__file__).resolve().parents[3] / "README.md"


def codes(text: str, pattern: str) -> list[int]:
    return [int(m) for m in re.findall(pattern, text, flags=re.MULTILINE)]


def test_the_docstring_the_help_and_the_readme_list_the_same_codes() -> None:
    table = codes(errors.__doc__, r"^    (\d)  \S")
    assert table == list(range(9))
    assert codes(EXIT_CODES, r"^  (\d)  \S") == table
    assert codes(README.read_text(), r"^\| (\d) \| ") == table
    help_text = CliRunner().invoke(main, ["--help"]).output
    assert "Exit codes:" in help_text and "7  a saved plan is stale" in help_text


def test_each_error_class_exits_with_its_documented_code() -> None:
    assert errors.Kimik3Error.exit_code == 1 and errors.StepError.exit_code == 1
    assert errors.ProfileError.exit_code == errors.InputError.exit_code == 2
    assert errors.PlanError.exit_code == 3 and CHANGES_PENDING == 4
    assert errors.HubError.exit_code == 6 and issubclass(errors.HubError, errors.DownloadFailed)
    assert errors.DownloadFailed.exit_code == 1
    assert errors.StalePlan.exit_code == 7 and errors.LocalFileError.exit_code == 8


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (errno.ENOSPC, "no space left on the device: free space on that file system"),
        (errno.EROFS, "read-only file system: point KIMIK3_STATE_DIR"),
        (errno.ENOENT, "no such file or directory"),
        (errno.EACCES, "permission denied: run as a user that may use it"),
        (errno.ENOTDIR, "a path component is not a directory"),
    ],
)
def test_an_os_error_reaching_the_cli_is_exit_8_naming_the_path_never_a_traceback(monkeypatch, code, says) -> None:
    import kimik3_reconciler.cli as cli

    def failing(path: str, cached: bool = False):  # as a state write deep inside a command would fail
        raise OSError(code, os.strerror(code), "/var/lib/k3/state/models/x.json")

    monkeypatch.setattr(cli, "load", failing)
    result = CliRunner().invoke(main, ["plan", "profile.yaml"])
    assert result.exit_code == 8, result.output
    assert f"error: /var/lib/k3/state/models/x.json: {says}" in result.output
    assert f"[errno {errno.errorcode[code]}]" in result.output and "Traceback" not in result.output


def test_an_os_error_without_a_path_or_errno_still_reads_plainly() -> None:
    assert str(errors.LocalFileError.from_os_error(TimeoutError("timed out"))) == "TimeoutError: timed out"
    assert str(errors.LocalFileError.from_os_error(OSError(errno.ENOSPC, "No space left on device"))).startswith(
        "OSError: no space left on the device"
    )


@pytest.mark.parametrize("command", ["apply", "reconcile"])
def test_verbose_after_the_command_name_is_the_global_flag(monkeypatch, tmp_path, command) -> None:
    """`kimik3 apply -v FILE` (where people put it) means `kimik3 -v apply FILE`, not 'no such option'."""
    import kimik3_reconciler.cli as cli

    profile = tmp_path / "profile.yaml"
    profile.write_text((Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml").read_text())
    seen: list[bool] = []

    def grab(ctx, json_out):  # noqa: ANN001, ANN202 - stands in for the orchestrator: records, then stops the command
        seen.append(ctx.obj["verbose"])
        raise errors.InputError("stopped by the test")

    monkeypatch.setattr(cli, "_ctx", grab)
    for args in (
        [command, "-v", str(profile)],
        [command, str(profile)],
        ["-v", command, str(profile)],
        [command, "--verbose", str(profile)],
    ):
        result = CliRunner().invoke(main, args)
        assert "No such option" not in result.output and "stopped by the test" in result.output, result.output
    assert seen == [True, False, True, True]
