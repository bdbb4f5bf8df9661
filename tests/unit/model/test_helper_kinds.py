"""The two helper processes (model/helpers.py) keep the state layout, commands and units hosts already have: a host
whose exporter and front an earlier kimik3 started finds them again (records, logs, units, `runs`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kimik3_reconciler.model.helper_env import EXPORTER_READS, FRONT_READS
from kimik3_reconciler.model.helpers import EXPORTER, FRONT, Helper
from kimik3_reconciler.model.records import exporter_config_key, exporter_key, front_config_key, front_key
from kimik3_reconciler.model.unit_files import exporter_unit, front_unit


@pytest.mark.parametrize(
    ("helper", "folder", "log", "unit", "reads", "record_key", "config_key", "unit_of"),
    [
        (
            EXPORTER,
            "metrics",
            "exporter.log",
            "kimi-k3-metrics.service",
            EXPORTER_READS,
            exporter_key,
            exporter_config_key,
            exporter_unit,
        ),
        (FRONT, "front", "front.log", "kimi-k3-front.service", FRONT_READS, front_key, front_config_key, front_unit),
    ],
)
def test_a_helpers_records_log_and_unit_are_where_earlier_kimik3_put_them(
    helper: Helper,
    folder: str,
    log: str,
    unit: str,
    reads: tuple[str, ...],
    record_key: Callable[[str], str],
    config_key: Callable[[str], str],
    unit_of: Callable[[str], str],
) -> None:
    """The same paths as model/records.py's keys (the CLI and the exporter's registry read those) and
    model/unit_files.py's unit names (the stale-unit planner matches those)."""
    assert helper.record_key("k3") == f"{folder}/k3/process.json" == record_key("k3")
    assert helper.config_key("k3") == f"{folder}/k3/config.json" == config_key("k3")
    assert helper.log_key("k3") == f"{folder}/k3/{log}"
    assert helper.unit_of("kimi-k3.service") == unit == unit_of("kimi-k3.service")
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
