"""A saved plan edited by hand is refused as edited, naming the part (exit 7, before the host is read), not as
"the host or the profile moved"; a part of the wrong shape is named by its place (exit 2), not by a pydantic dump.
Held-back review (issue 30): both read as something else to a new user."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

import kimik3_reconciler.adapters as adapters
from kimik3_reconciler import cli
from kimik3_reconciler.errors import InputError, StalePlan
from kimik3_reconciler.model.plan_file import content_digest, read_saved_plan, write_saved_plan
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter

FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard-one" * 10}


@pytest.fixture
def world(tmp_path: Path, monkeypatch):
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    (tmp_path / "profile.yaml").write_text(FAKE_PROFILE)
    ports, docker = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    orchestrator = Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: orchestrator.ports)
    return orchestrator, docker, tmp_path


def _kimik3(work: Path, *args: str):
    return CliRunner().invoke(cli.main, ["--dockerfile", str(work / "Dockerfile.llamacpp"), *args])


def _plan_file(orchestrator: Orchestrator, work: Path) -> dict:
    source = str(work / "profile.yaml")
    return json.loads(write_saved_plan(orchestrator.save_plan(parse_profile(FAKE_PROFILE, source), source)[1]))


def _launch(data: dict) -> dict:
    return next(s for s in data["steps"] if s["kind"] == "container")["spec"]["fields"]["container"]


def _resealed(data: dict) -> dict:
    """As if whoever edited the file also rewrote its digests (they catch edits, not forgeries)."""
    return {**data, "content_digest": content_digest({k: v for k, v in data.items() if k != "content_digest"})}


def test_a_hand_edited_payload_is_refused_as_edited_naming_the_step_before_the_host_is_read(world) -> None:
    orchestrator, docker, work = world
    planned = _kimik3(work, "plan", str(work / "profile.yaml"), "-out", str(work / "p.plan"))
    assert planned.exit_code == 0, planned.output
    text = (work / "p.plan").read_text()
    ctx = re.compile(r'("--ctx-size",\s+)"4096"')
    assert len(ctx.findall(text)) == 1  # as a user opens the file: the launch's argv, edited in place
    (work / "p.plan").write_text(ctx.sub(r'\1"8192"', text))
    calls = list(docker.calls)
    applied = _kimik3(work, "apply", str(work / "p.plan"))
    assert applied.exit_code == 7, applied.output
    said = " ".join(applied.output.split())
    assert f"the saved plan {work / 'p.plan'} was edited after kimik3 wrote it" in said
    assert "step 5 (+ container k3-test)" in said and "nothing was changed" in said
    assert "the host or the profile moved" not in said
    assert docker.calls == calls and docker.containers == {}  # refused on reading: nothing observed, nothing run


def test_a_plan_reformatted_without_an_edit_still_reads(world) -> None:
    orchestrator, _, work = world
    data = _plan_file(orchestrator, work)
    again = json.dumps(data, indent=4, sort_keys=True)  # as `jq --sort-keys .` leaves it
    assert read_saved_plan(again, "p.plan") == read_saved_plan(json.dumps(data), "p.plan")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ("header", "the header (created, kimik3, warnings)"),
        ("profile", "the profile text"),
        ("observed", "the observed facts"),
        ("reorder", "the order of the steps"),
        ("copy", "step 6 (+ container k3-test) (a copy)"),
        ("remove", "1 step(s) removed"),
    ],
)
def test_each_edited_part_is_named(world, edit: str, said: str) -> None:
    orchestrator, _, work = world
    data = _plan_file(orchestrator, work)
    steps = data["steps"]
    at = next(i for i, s in enumerate(steps) if s["kind"] == "container")
    if edit == "header":
        data["created"] = "2020-01-01T00:00:00+00:00"
    elif edit == "profile":
        data["profile"]["text"] += "# reviewed\n"
    elif edit == "observed":
        data["observed"]["basis"]["host physical_cores"] = "64"
    elif edit == "reorder":
        steps.insert(0, steps.pop(at))
    elif edit == "copy":
        steps.insert(at, dict(steps[at]))
    else:
        del steps[at]
    with pytest.raises(StalePlan) as refused:
        read_saved_plan(json.dumps(data), "p.plan")
    assert refused.value.exit_code == 7 and said in str(refused.value)
    assert refused.value.moved == (f"edited: {said}",)


def test_a_plan_whose_digests_were_removed_is_edited_and_an_older_one_is_another_kimik3s(world) -> None:
    import dataclasses

    from kimik3_reconciler.cli.inputs import check_made_by, kimik3_identity

    orchestrator, _, work = world
    data = {**_plan_file(orchestrator, work), "kimik3": kimik3_identity()}
    check_made_by(read_saved_plan(json.dumps(_resealed(data)), "p.plan"), "p.plan")  # as written: runs
    stripped = read_saved_plan(json.dumps({k: v for k, v in data.items() if k != "content_digest"}), "p.plan")
    with pytest.raises(StalePlan, match="p.plan was edited after kimik3 wrote it \\(its content digests were removed"):
        check_made_by(stripped, "p.plan")
    with pytest.raises(StalePlan, match="was made by an older kimik3"):  # before digests, and before "kimik3"
        check_made_by(dataclasses.replace(stripped, made_by=""), "p.plan")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            lambda d: _launch(d).update(command="llama-server -c 4096"),
            "step 5 (+ container k3-test): payload LaunchContainer: container.command: Input should be a list "
            "(found 'llama-server -c 4096')",
        ),
        (
            lambda d: _launch(d).update(mounts=[{"source": 1}]),
            "step 5 (+ container k3-test): payload LaunchContainer: container.mounts[0].source: Input should be a valid "
            "string (found 1); container.mounts[0].target: Field required",
        ),
        (
            lambda d: d["steps"][0].update(action="delete-everything"),
            "step 1: action: one of noop, create, update, replace, delete, read expected, found 'delete-everything'",
        ),
        (lambda d: d["profile"].update(text=None), "profile.text: a string expected, found null"),
    ],
    ids=["argv-as-string", "mount-fields", "unknown-action", "profile-text"],
)
def test_a_wrong_shaped_part_is_named_by_its_place_not_dumped_by_pydantic(world, edit, said: str) -> None:
    orchestrator, _, work = world
    data = _plan_file(orchestrator, work)
    edit(data)
    with pytest.raises(InputError) as refused:  # the digests rewritten: only the shape is wrong
        read_saved_plan(json.dumps(_resealed(data)), "p.plan")
    message = str(refused.value)
    assert refused.value.exit_code == 2 and message.startswith("p.plan: not a readable kimik3 saved plan (")
    assert said in message, message
    assert "\n" not in message and "validation error" not in message and "pydantic.dev" not in message
    with pytest.raises(StalePlan) as edited:  # as a hand edit leaves it: the edit first, then what no longer reads
        read_saved_plan(json.dumps(data), "p.plan")
    assert "was edited after kimik3 wrote it" in str(edited.value) and f"it no longer reads: {said}" in str(
        edited.value
    )


def test_a_wrong_shaped_plan_through_the_command_is_one_line_exit_2(world) -> None:
    orchestrator, docker, work = world
    data = _plan_file(orchestrator, work)
    _launch(data).update(command=7)
    (work / "p.plan").write_text(json.dumps(_resealed(data)))
    applied = _kimik3(work, "apply", str(work / "p.plan"))
    assert applied.exit_code == 2, applied.output
    assert "container.command: Input should be a list (found 7)" in " ".join(applied.output.split())
    assert "Traceback" not in applied.output and "For further information" not in applied.output
    assert docker.containers == {}
