"""docs/design.md, the map a newcomer reads first, against the code: the modules it names exist, its layer order is
pyproject's layers contract, its fleet commands are the CLI's, and what it says of engine imports is what the
import contract allows (its exceptions named, not denied)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import click

from kimik3_reconciler.cli import main

ROOT = Path(__file__).resolve().parents[3]
DESIGN = (ROOT / "docs" / "design.md").read_text()
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
PACKAGE = ROOT / "kimik3_reconciler"


def test_every_module_the_map_names_exists() -> None:
    # a path as the map writes one: words and '/' ending in .py, or a folder (word/); relative to the package,
    # to a folder the same sentence names (engines/llamacpp/: vram_fit.py ...), or to the repository
    named = set(re.findall(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:py|sh)|(?:[\w-]+/)+)(?![\w/<])", DESIGN))
    missing = sorted(
        path
        for path in named
        if not any((base / path).exists() for base in (PACKAGE, ROOT, PACKAGE / "engines", ROOT / "tests" / "unit"))
    )
    assert not missing, missing


def test_the_layer_order_is_the_import_contracts() -> None:
    (layers,) = [c["layers"] for c in CONTRACTS if c["type"] == "layers"]
    contract = [
        sorted(part.strip().removeprefix("kimik3_reconciler.") for part in layer.split("|")) for layer in layers
    ]
    (order,) = re.findall(r"The order, top to bottom: `([^`]+)`", DESIGN.replace("\n", " "))
    written = [sorted(part.strip() for part in floor.split("|")) for floor in order.split(">")]
    assert written == contract


def test_the_fleet_commands_are_the_clis() -> None:
    fleet = main.get_command(click.Context(main), "fleet")
    commands = sorted(n for n in fleet.list_commands(click.Context(fleet)) if not fleet.get_command(None, n).hidden)
    written = {name for names in re.findall(r"`kimik3 fleet ([\w|]+)", DESIGN) for name in names.split("|")}
    assert sorted(written) == commands


def test_what_the_map_says_of_engine_imports_is_what_the_contract_allows() -> None:
    (protocol,) = [c for c in CONTRACTS if c["name"].startswith("Generic code learns the serving engine")]
    if protocol.get("ignore_imports"):
        # the contract lists generic modules that still import llama.cpp's folder by name: the map says so
        assert "never imports an engine's folder" not in DESIGN.replace("\n", " ")
        assert "only through the protocol" not in DESIGN.replace("\n", " ")
        assert "ignore_imports" in DESIGN


def test_the_map_names_where_each_engines_profile_rules_run() -> None:
    from kimik3_reconciler.model.engine_names import ENGINES

    flat = DESIGN.replace("\n", " ")
    for name, entry in ENGINES.items():
        path = entry.rules.removeprefix("kimik3_reconciler.").replace(".", "/") + ".py"
        assert path in flat, f"{name}: its rules run in {path}, which docs/design.md does not name"
