"""`kimik3` run in this process through click's CliRunner, as the CLI unit tests run it: its state and cache dirs
in the test's folder, the exit code, stdout and stderr back."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kimik3_reconciler.cli import main


def cli_run(args: list[str], folder: Path, **env: str | None) -> tuple[int, str, str]:
    """`kimik3 ARGS` with KIMIK3_STATE_DIR and KIMIK3_CACHE_DIR under `folder`, and `env` besides (None unsets a
    variable): (exit code, stdout, stderr)."""
    environment = {"KIMIK3_STATE_DIR": str(folder / "state"), "KIMIK3_CACHE_DIR": str(folder / "cache"), **env}
    result = CliRunner().invoke(main, args, catch_exceptions=False, env=environment)
    return result.exit_code, result.stdout, result.stderr
