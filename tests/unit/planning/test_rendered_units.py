"""Golden files of the systemd unit and env file kimik3 renders for each example profile with a `systemd:`
section, `systemd-analyze verify` on every one, and the EnvironmentFile trap (seed 000 step 7).
Regenerate the golden files with KIMIK3_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.shipped import pinned_text
from test_rendered_specs import GOLDEN, PROFILES, observed_for

from kimik3_reconciler.engines.llamacpp.image import render_image_build
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ContainerFact, SystemdFacts, UnitFact, UnitFileFact
from kimik3_reconciler.model.specs import UnitInstall
from kimik3_reconciler.model.unit_files import split_header
from kimik3_reconciler.observe.unit import parse_show, parse_unit_file
from kimik3_reconciler.planning.launch import render_launch
from kimik3_reconciler.planning.unit_step import render_env_file, render_install, unit_conflicts

WITH_UNITS = [p for p in PROFILES if "\nsystemd:" in p.read_text()]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "systemd"


def installed(path: Path, docker_cli: str = "/usr/bin/docker") -> UnitInstall:
    profile, observed = observed_for(path)
    image = render_image_build(profile, observed)
    return render_install(profile, observed, render_launch(profile, observed, image.tag, image.fingerprint), docker_cli)


def test_the_examples_with_units_are_the_pair() -> None:
    assert [p.stem for p in WITH_UNITS] == ["hybrid-q2", "interactive"]


@pytest.mark.parametrize("path", WITH_UNITS, ids=lambda p: p.stem)
def test_rendered_unit_and_env_file_match_golden(path: Path) -> None:
    install = installed(path)
    for suffix, text in ((".service", install.unit_text), (".env", install.env_text)):
        golden = GOLDEN / f"{path.stem}{suffix}"
        if os.environ.get("KIMIK3_UPDATE_GOLDEN") == "1":
            golden.write_text(text)
        assert golden.read_text() == text, f"{golden.name} differs: KIMIK3_UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.parametrize("path", WITH_UNITS, ids=lambda p: p.stem)
def test_every_rendered_unit_passes_systemd_analyze_verify(path: Path, tmp_path: Path) -> None:
    analyze, docker = shutil.which("systemd-analyze"), shutil.which("docker")
    assert analyze, "systemd-analyze is missing: apt-get install systemd (it needs no running systemd)"
    assert docker, "verify checks that ExecStart's binary exists: the test renders the docker CLI found here"
    install = installed(path, docker_cli=str(Path(docker).resolve()))
    unit = tmp_path / install.unit
    unit.write_text(install.unit_text)
    result = subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_verify_would_catch_a_missing_binary(tmp_path: Path) -> None:
    install = installed(WITH_UNITS[0], docker_cli="/nonexistent/docker")
    unit = tmp_path / install.unit
    unit.write_text(install.unit_text)
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert result.returncode != 0 and "/nonexistent/docker" in result.stderr


def test_seed_rules_hold_in_every_rendered_unit() -> None:
    for path in WITH_UNITS:
        install = installed(path)
        lines = install.unit_text.splitlines()
        assert lines[0].startswith("# kimik3: fingerprint=") and lines[0].endswith(f"profile={install.profile}")
        # After/Requires docker.service; the container kimik3 made, in the foreground; a clean llama-server exit.
        assert any(ln.startswith("After=docker.service") for ln in lines) and "Requires=docker.service" in lines
        assert "ExecStart=/usr/bin/docker start --attach ${KIMIK3_CONTAINER}" in lines
        assert "ExecStop=/usr/bin/docker stop --time 120 ${KIMIK3_CONTAINER}" in lines
        assert "Restart=on-failure" in lines and "TimeoutStopSec=150" in lines
        assert f"EnvironmentFile={install.env_path}" in lines
        assert "docker run" not in install.unit_text and "pull" not in install.unit_text  # never rebuild/download


def test_the_pair_conflicts_both_ways() -> None:
    main, interactive = (installed(p) for p in WITH_UNITS)
    assert "Conflicts=kimi-k3-interactive.service" in main.unit_text.splitlines()
    assert "Conflicts=kimi-k3.service" in interactive.unit_text.splitlines()
    # ...and ordered against each other, so the stop of one finishes before the other starts.
    assert "After=docker.service kimi-k3-interactive.service" in main.unit_text.splitlines()
    assert "After=docker.service kimi-k3.service" in interactive.unit_text.splitlines()


def _assignments(env_text: str) -> dict[str, str]:
    """Parse an env file the way systemd does for the forms kimik3 writes (bare, or double-quoted)."""
    values = {}
    for line in env_text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, raw = line.partition("=")
        if raw.startswith('"'):
            assert raw.endswith('"') and len(raw) >= 2, line
            values[name] = re.sub(r'\\(["\\$`])', r"\1", raw[1:-1])
        else:
            assert re.fullmatch(r"[A-Za-z0-9_./:@+,=-]*", raw), f"unquoted value needs quoting: {line}"
            values[name] = raw
    return values


def test_env_file_values_survive_as_written_never_with_an_inline_comment() -> None:
    # systemd folds `VALUE # comment` into the value; a value with '#' (or spaces, quotes, $) is quoted.
    tricky = {"KIMIK3_MODEL_CACHE": "/srv/models #2/hub", "QUOTES": "a\"b\\c$d`e 'f'", "PLAIN": "kimi-k3"}
    text = render_env_file(tricky, "kimi-k3")
    assert 'KIMIK3_MODEL_CACHE="/srv/models #2/hub"' in text.splitlines()
    assert "PLAIN=kimi-k3" in text.splitlines()
    assert _assignments(text) == tricky
    for path in WITH_UNITS:
        _assignments(installed(path).env_text)  # every value bare-safe or fully quoted


def test_control_characters_are_refused_not_escaped() -> None:
    with pytest.raises(PlanError, match="control characters"):
        render_env_file({"X": "one\nY=two"}, "kimi-k3")


def test_no_secret_reaches_the_env_file(tmp_path: Path) -> None:
    with_key = tmp_path / WITH_UNITS[0].name
    with_key.write_text(pinned_text(WITH_UNITS[0]).replace("# api_key_file:", "api_key_file:"))
    install = installed(with_key)
    assert "api-key" not in install.env_text + install.unit_text and "TOKEN" not in install.env_text.upper()


def test_a_hand_edit_is_seen_against_the_header() -> None:
    text = installed(WITH_UNITS[0]).unit_text
    fact = parse_unit_file("/etc/systemd/system/kimi-k3.service", text)
    assert fact.fingerprint == fact.body_fingerprint and not fact.edited and fact.profile == "kimi-k3"
    edited = parse_unit_file("/etc/systemd/system/kimi-k3.service", text.replace("RestartSec=10", "RestartSec=1"))
    assert edited.edited and edited.fingerprint == fact.fingerprint
    assert split_header("[Unit]\nDescription=someone else's\n")[0] is None


def test_gpu_overlap_adds_the_other_profiles_unit_to_conflicts() -> None:
    profile, observed = observed_for(WITH_UNITS[0])
    profile = profile.model_copy(update={"systemd": profile.systemd.model_copy(update={"conflicts": []})})
    other_unit = UnitFact(
        name="k3-eval.service",
        unit_file=UnitFileFact(path="/etc/systemd/system/k3-eval.service", fingerprint="0" * 16, profile="k3-eval"),
    )
    sharing = ContainerFact(
        id="e" * 64, name="k3-eval", state="exited", profile="k3-eval", inputs={"gpus": [7], "serve.port": 9000}
    )
    observed = observed.model_copy(
        update={"others": (sharing,), "systemd": SystemdFacts(booted=True, units=(other_unit,))}
    )
    assert unit_conflicts(profile, observed) == ("k3-eval.service",)
    apart = sharing.model_copy(update={"inputs": {"gpus": "none", "serve.port": 9000}})
    assert unit_conflicts(profile, observed.model_copy(update={"others": (apart,)})) == ()


def test_parse_show_on_a_recorded_systemctl_output() -> None:
    states = parse_show((FIXTURES / "show-two-units.txt").read_text())
    assert states["probe.service"]["ActiveState"] == "active" and states["probe.service"]["UnitFileState"] == "enabled"
    assert states["nothere.service"]["LoadState"] == "not-found"


# The front's unit (issue 38 item 12: metrics.handover under `systemd:`), next to the exporter's -----------------

FRONT_ARGV = ("/usr/bin/python3", "-m", "kimik3_reconciler")


def test_the_front_unit_matches_golden_and_runs_front_serve_with_the_profile_as_one_word() -> None:
    from kimik3_reconciler.planning.front_unit import render_front_unit_text

    text = render_front_unit_text("kimi-k3", FRONT_ARGV, "/etc/kimik3/kimi-k3-front.env")
    golden = GOLDEN / "kimi-k3-front.service"
    if os.environ.get("KIMIK3_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden.name} differs: KIMIK3_UPDATE_GOLDEN=1 and review the diff"
    body = split_header(text)[2].splitlines()
    assert "ExecStart=/usr/bin/python3 -m kimik3_reconciler front-serve ${KIMIK3_PROFILE}" in body
    assert "Restart=on-failure" in body and "EnvironmentFile=/etc/kimik3/kimi-k3-front.env" in body


def test_the_front_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    import sys

    from kimik3_reconciler.planning.front_unit import render_front_unit_text

    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: apt-get install systemd (it needs no running systemd)"
    unit = tmp_path / "kimi-k3-front.service"
    unit.write_text(
        render_front_unit_text("kimi-k3", (sys.executable, "-m", "kimik3_reconciler"), "/etc/kimik3/kimi-k3-front.env")
    )
    result = subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_a_front_unit_refuses_an_interpreter_path_a_unit_cannot_run() -> None:
    from kimik3_reconciler.planning.front_unit import render_front_unit_text

    with pytest.raises(PlanError, match="absolute path without spaces"):
        render_front_unit_text("kimi-k3", ("/opt/my python/bin/python3", "-m", "kimik3_reconciler"), "/etc/x.env")
