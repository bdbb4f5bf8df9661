"""A fourth engine is its folder and one registry line (issue 37): the probe engine (tests/support/probe_engine/: its
ServingEngine, its rules, its profile cases) is added to the registry the way a real engine's line sits there, and
the real CLI validates, plans (on the orchestrator's fakes) and routes its profiles with no generic module edited.
Before the registry gave every engine list, validate refused `engine: probe` (the schema's choices were a Literal
fixed at import) and the rule order raised KeyError (profile_rules/order.py's hand-kept BY_ENGINE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support import probe_engine
from support.fakes import FakeHub, fake_ports

import kimik3_reconciler.adapters as adapters
from kimik3_reconciler import cli
from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.model.engine_names import ENGINES
from kimik3_reconciler.model.profile_schema import profile_json_schema

CASES = Path(probe_engine.__file__).parent / "cases"
REVISION = "c3639a1e9cbea4bb749a61643e0d6b7bc8cb0e04"
FILES = {"config.json": b"{}", "model-00001-of-00001.safetensors": b"weights" * 16}
HOST = """gpus: []
ram_gib: 64
driver: null
"""


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # noqa: ANN201 - runs the CLI with the probe registered
    monkeypatch.setitem(ENGINES, "probe", probe_engine.ENTRY)
    monkeypatch.setenv("KIMIK3_STATE_DIR", str(tmp_path / "state"))

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli.main, list(args))
        return result.exit_code, result.stdout + result.stderr

    return run


def test_the_registry_entry_is_all_the_engine_resolver_needs(probe) -> None:  # noqa: ANN001
    assert engine_for("probe") is probe_engine.ENGINE
    schema = profile_json_schema()
    assert "probe" in schema["properties"]["engine"]["enum"]
    ours = next(
        item for item in schema["allOf"] if item["if"].get("properties", {}).get("engine") == {"const": "probe"}
    )
    assert ours["then"]["required"] == ["image"]  # a pulled image, no section of its own


def test_validate_takes_its_profile_and_runs_its_rules(probe) -> None:  # noqa: ANN001
    code, out = probe("validate", str(CASES / "serves.yaml"))
    assert code == 0, out
    code, out = probe("validate", str(CASES / "quant-refused.yaml"))
    assert code == 2 and "model.quant" in out and "this profile's engine is probe" in out, out
    code, out = probe("validate", str(CASES / "repo-refused.yaml"))  # the probe's own rule (its rules module)
    assert code == 2 and "model.repo" in out and "probe/ checkpoints only" in out, out


def test_plan_pulls_its_image_and_launches_its_server(probe, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # noqa: ANN001
    hub = FakeHub("probe/Checkpoint", REVISION, FILES, tmp_path / "hub")
    ports, _ = fake_ports(hub)
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: ports)
    code, out = probe("plan", "-v", str(CASES / "serves.yaml"))
    assert code in (0, 3), out  # 3: changes to make
    assert "probe/server:1@sha256:" in out and "llama" not in out.lower(), out


def test_routes_lists_its_route_and_marks_the_profiles(probe, tmp_path: Path) -> None:  # noqa: ANN001
    host = tmp_path / "host.yaml"
    host.write_text(HOST)
    code, out = probe("routes", "--host-facts", str(host), str(CASES / "serves.yaml"))
    assert code == 0, out
    assert "yes probe    probe/Checkpoint cpu (this profile)" in out, out
