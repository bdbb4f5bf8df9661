"""rollout.warm_prompts (issue 40 item 2): the operator's hot prompts file, read and checked with the fleet file;
a missing or bad file is refused naming the field (and line) or the file's own line, as the rest of the fleet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_fleet_file import DEMO, HEAD

from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.fleet import parse_fleet

FLEET = (
    HEAD
    + """\
      a: {ansible_host: 127.0.0.1}
      b: {ansible_host: 127.0.0.1}
overrides:
  b: {serve: {port: 18182}}
rollout:
  warm_prompts: hot.yaml
router: {version: "1.13.0"}
"""
)


def _fleet(tmp_path: Path, prompts: str | None):  # noqa: ANN202 - fleet.Fleet
    shutil.copy(DEMO, tmp_path / "demo-cpu.yaml")
    if prompts is not None:
        (tmp_path / "hot.yaml").write_text(prompts)
    return parse_fleet(FLEET, str(tmp_path / "fleet.yaml"), read_text)


def test_the_declared_prompts_become_chat_request_bodies(tmp_path: Path) -> None:
    fleet = _fleet(
        tmp_path,
        "prompts:\n"
        "  - messages: [{role: system, content: You are the build agent.}]\n"
        "    tools: [{type: function, function: {name: run, parameters: {type: object}}}]\n"
        "  - messages: [{role: system, content: You review diffs.}]\n",
    )
    assert fleet.rollout.warm_prompts == str(tmp_path / "hot.yaml")
    first, second = fleet.rollout.hot_prompts
    assert first["messages"] == [{"role": "system", "content": "You are the build agent."}]
    assert first["tools"][0]["function"]["name"] == "run" and "tools" not in second


def test_a_missing_file_is_refused_at_the_field(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, None)
    (problem,) = refused.value.problems
    assert (problem.line, problem.field) == (13, "rollout.warm_prompts") and "hot.yaml" in problem.message


@pytest.mark.parametrize(
    ("prompts", "line", "field", "message"),
    [
        ("prompts: []\n", 1, "prompts", "at least 1"),
        ("prompts:\n  - messages: [{role: sys, content: x}]\n", 2, "prompts[0].messages[0].role", "system"),
        ("prompts:\n  - messages: [{role: system, content: x}]\n    tool: []\n", 3, "prompts[0].tool", ""),
        ("prompts:\n  - {}\n", 2, "prompts[0].messages", "required"),
    ],
)
def test_a_bad_file_is_refused_at_its_own_line(tmp_path: Path, prompts: str, line: int, field: str, message: str):
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, prompts)
    got = [(p.source, p.line, p.field, p.message) for p in refused.value.problems]
    assert any(s == str(tmp_path / "hot.yaml") and li == line and f == field and message in m for s, li, f, m in got), (
        got
    )


def test_without_the_field_nothing_is_read(tmp_path: Path) -> None:
    shutil.copy(DEMO, tmp_path / "demo-cpu.yaml")
    text = FLEET.replace("rollout:\n  warm_prompts: hot.yaml\n", "")
    fleet = parse_fleet(text, str(tmp_path / "fleet.yaml"), read_text)
    assert fleet.rollout.warm_prompts is None and fleet.rollout.hot_prompts == ()
