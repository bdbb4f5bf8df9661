"""`kimik3 plan … | head -1` against the real dockerd and the fixture hub (issue 39 item 5): it exited 8 ("a local
file could not be used") with a BrokenPipeError in 2 of 8 tries. A real pipe whose reader reads one line, or none,
then closes, repeated: exit 0 every time (and 4 with --detailed-exitcode: the plan's own code, the pipe or not),
nothing about a pipe on stderr. Nothing is applied: the plan is of a host without this profile."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.closed_pipe import run_into_closed_pipe
from support.realparts import demo_hub, demo_profile, write_profile

pytestmark = pytest.mark.docker

NAME, PORT = "k3cp-plan", 19392  # never launched: only planned
TRIES = {
    True: 8,
    False: 2,
}  # a reader that reads first races the output (2 of 8 failed); one that reads nothing always wins


@pytest.mark.parametrize("read_first_line", [True, False], ids=["head -1", "closed at once"])
def test_plan_into_a_closed_pipe_exits_with_its_own_code(tmp_path: Path, read_first_line: bool) -> None:
    with demo_hub() as hub:
        write_profile(tmp_path, demo_profile(tmp_path, NAME, PORT, hub.url))
        for args, expected in (
            (["plan", "profile.yaml"], 0),
            (["plan", "--json", "profile.yaml"], 0),
            (["plan", "--detailed-exitcode", "profile.yaml"], 4),
        ):
            for _ in range(TRIES[read_first_line]):
                code, err = run_into_closed_pipe(args, tmp_path, read_first_line)
                assert code == expected and "Error" not in err, (args, code, err[-2000:])
