"""A closed stdout pipe ends kimik3's output quietly (issue 39 item 5): `kimik3 explain | head -1` exited 1 every
time (rich's own BrokenPipe handler), and `kimik3 plan … | head -1` exited 8 ("a local file could not be used")
with a BrokenPipeError now and then. The real command, a real pipe whose reader goes early, repeated: exit 0, and
nothing about a pipe on stderr. (`plan` against the real dockerd and hub: tests/integration/test_closed_pipe_plan.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.closed_pipe import run_into_closed_pipe

TRIES = 5


@pytest.mark.parametrize("read_first_line", [True, False], ids=["head -1", "closed at once"])
@pytest.mark.parametrize(
    "args", [["explain"], ["explain", "--json"], ["--help"], ["schema"]], ids=lambda a: " ".join(a)
)
def test_a_reader_that_goes_early_ends_the_output_quietly_exit_0(
    tmp_path: Path, args: list[str], read_first_line: bool
) -> None:
    for _ in range(TRIES):
        code, err = run_into_closed_pipe(args, tmp_path, read_first_line)
        assert code == 0 and "Error" not in err and "error:" not in err, (code, err[-2000:])


def test_a_failure_keeps_its_exit_code_when_the_pipe_is_closed(tmp_path: Path) -> None:
    """The pipe's reader going never turns a failure into success: the command's own code and message stay."""
    code, err = run_into_closed_pipe(["explain", "no-such-rule"], tmp_path, read_first_line=False)
    assert code == 2 and "unknown rule 'no-such-rule'" in err


def test_reconcile_ends_when_nobody_reads_its_passes(tmp_path: Path) -> None:
    """The loop writes a line per pass forever: once its reader is gone it stops (exit 0) rather than running on
    unseen. A profile that does not parse: each pass is a line, nothing on the host is looked at."""
    (tmp_path / "bad.yaml").write_text("apiVersion: kimik3/v1\nname: k3\nmodle: {}\n")
    code, err = run_into_closed_pipe(["reconcile", "--interval", "1s", "bad.yaml"], tmp_path, read_first_line=True)
    assert code == 0 and "Error" not in err, (code, err[-2000:])


def test_a_reader_gone_before_anything_is_written_is_seen() -> None:
    """Review of issue 39: `status --watch | head -1` ran on forever. Off a terminal rich's Live writes nothing until
    it stops, so no write ever met the closed pipe and `reader_gone` stayed False; it asks the pipe itself too (its
    write end polls as POLLERR once the read end is closed). A real pipe; a pipe still read, and a file, are not."""
    from kimik3_reconciler.console import reader_gone

    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stream:
        assert not reader_gone(stream)  # its reader is still there
        os.close(read_end)
        assert reader_gone(stream)
    with open(os.devnull, "w") as stream:
        assert not reader_gone(stream)
