"""The two helper processes (model/helpers.py) keep the state layout, commands and units hosts already have: a host
whose exporter and front an earlier kimik3 started finds them again (records, logs, units, `runs`)."""

from __future__ import annotations

import pytest

from kimik3_reconciler.model.helper_env import EXPORTER_READS, FRONT_READS
from kimik3_reconciler.model.helpers import EXPORTER, FRONT, Helper


@pytest.mark.parametrize(
    ("helper", "folder", "log", "unit", "reads"),
    [
        (EXPORTER, "metrics", "exporter.log", "kimi-k3-metrics.service", EXPORTER_READS),
        (FRONT, "front", "front.log", "kimi-k3-front.service", FRONT_READS),
    ],
)
def test_a_helpers_records_log_and_unit_are_where_earlier_kimik3_put_them(
    helper: Helper, folder: str, log: str, unit: str, reads: tuple[str, ...]
) -> None:
    assert helper.record_key("k3") == f"{folder}/k3/process.json"
    assert helper.config_key("k3") == f"{folder}/k3/config.json"
    assert helper.log_key("k3") == f"{folder}/k3/{log}"
    assert helper.unit_of("kimi-k3.service") == unit
    assert helper.reads == reads


@pytest.mark.parametrize("helper", [EXPORTER, FRONT])
def test_a_pid_runs_the_helper_only_with_its_command_and_this_profile(helper: Helper) -> None:
    argv = ("/usr/bin/python3", "-m", "kimik3_reconciler", helper.command, "k3")
    assert helper.runs(argv, "k3") and helper.runs(list(argv), "k3")
    assert not helper.runs(argv, "k3-other")  # another profile's helper
    assert not helper.runs(argv[:-1], "k3")  # the command without a profile
    assert not helper.runs(None, "k3")  # the pid is gone
    other = EXPORTER if helper is FRONT else FRONT
    assert not helper.runs((*argv[:3], other.command, "k3"), "k3")  # the other helper of the same profile
