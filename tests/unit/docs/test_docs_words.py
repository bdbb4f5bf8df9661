"""The words a newcomer reads match the tool: README, docs/ and every command's --help point at nothing the reader
does not have (the project's internal source names, issue numbers, files outside the repository), the README names
every command and every shipped profile, `--help` names the engines, and docs' links to headings resolve."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from kimik3_reconciler.cli import main

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# What a reader cannot open: the sources by their internal numbers (docs/sources.md names them, once each),
# tracker issues, and the project's working files outside the repository.
ELSEWHERE = re.compile(
    r"\b[Ss]eeds?[- ]0\d\d\b|\b[Ii]ssues? #?\d+|\bshared/|\bseeds/|PROFILE\.md|REFERENCE\.md|"
    r"TESTING\.md|STYLE\.md|(?<![\w.])/work/"
)
SOURCES_NAMING = re.compile(r'\(short name in rules: "seed 00\d"\)|\("seed 000 step 5"\)')


def _helps() -> dict[str, str]:
    ctx = click.Context(main, info_name="kimik3")
    helps = {"kimik3": main.get_help(ctx)}
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        if not command.hidden:
            helps[name] = command.get_help(click.Context(command, info_name=name, parent=ctx))
    return helps


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_point_at_nothing_the_reader_lacks(page: Path) -> None:
    text = SOURCES_NAMING.sub("", page.read_text())
    found = [f"{page.name}:{text[: m.start()].count(chr(10)) + 1}: {m.group()}" for m in ELSEWHERE.finditer(text)]
    assert not found, found


def test_help_points_at_nothing_the_reader_lacks() -> None:
    found = [(name, m.group()) for name, text in _helps().items() for m in ELSEWHERE.finditer(text)]
    assert not found, found


def test_help_names_the_engines() -> None:
    text = " ".join(_helps()["kimik3"].split())
    for engine in ("llama.cpp", "vLLM", "SGLang"):
        assert engine in text, engine


def test_readme_lists_every_command_once() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `kimik3 ")]
    named = [re.match(r"\| `kimik3 ([a-z-]+)", row).group(1) for row in rows]
    ctx = click.Context(main, info_name="kimik3")
    commands = {name for name in main.list_commands(ctx) if not main.get_command(ctx, name).hidden} - {"down"}
    assert sorted(named) == sorted(commands), (named, commands)
    assert "(`down`)" in next(row for row in rows if row.startswith("| `kimik3 destroy"))


def test_readme_lists_every_profile() -> None:
    readme = (ROOT / "README.md").read_text()
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        assert f"`{profile.name}`" in readme, profile.name


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped but `-` and `_`, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_headings_resolve() -> None:
    anchors = {
        page.name: {_anchor(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)} for page in PAGES
    }
    broken = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md|)#([\w-]+)\)", page.read_text()):
            name = Path(target).name if target else page.name
            if name in anchors and anchor not in anchors[name]:
                broken.append(f"{page.name}: {target}#{anchor}")
    assert not broken, broken


def test_links_to_files_resolve() -> None:
    broken = [
        f"{page.name}: {target}"
        for page in PAGES
        for target in re.findall(
            r"\]\(((?:\.\./|\./)?[\w./-]+\.(?:py|md|toml|json|yaml|sh))(?:#[\w-]+)?\)", page.read_text()
        )
        if not (page.parent / target).exists()
    ]
    assert not broken, broken


def test_first_run_names_the_real_check_for_each_need() -> None:
    """docs/first-run.md's table of what a host needs: each rule it names is kimik3's, enforced in a module the
    row links to, so the page points at the code that makes the check."""
    from kimik3_reconciler.model.rulebook import BY_ID

    rows = [
        line
        for line in (ROOT / "docs" / "first-run.md").read_text().splitlines()
        if line.startswith("| ") and "](../kimik3_reconciler/" in line
    ]
    assert len(rows) >= 10
    for row in rows:
        linked = {
            "kimik3_reconciler." + target.removesuffix(".py").replace("/", ".")
            for target in re.findall(r"\]\(\.\./kimik3_reconciler/([\w/]+\.py)\)", row)
        }
        for rule in re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", row):
            assert rule in BY_ID, (rule, row)
            assert set(BY_ID[rule].enforced_by) & linked, (rule, BY_ID[rule].enforced_by, linked)
