"""`fleet apply`'s own inputs refused (exit 2, named) before the fleet lock and the router: the `fleet` extra's
ansible-playbook or smg missing, an `--install` wheelhouse without kimik3's wheel (each used to start the router first, then
stop with "nothing touched"); `--traffic-timeout` takes a duration as `fleet recover`'s does (it took seconds only)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3_reconciler.cli import fleet_router, main

ROOT = Path(__file__).parents[3]


def _apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ansible: bool, *options: str, smg: bool = True
) -> tuple[str, list]:
    """`fleet apply` of the shipped example with `options`: ("EXIT OUTPUT", the router starts asked for); the state
    dir is left untouched whatever the outcome."""
    for name in ("demo-cpu.yaml", "fleet-demo.yaml"):
        shutil.copy(ROOT / "profiles" / name, tmp_path / name)
    real_which = shutil.which

    def which(cmd: str, **kw: object) -> str | None:
        if cmd == "ansible-playbook":
            return "/usr/bin/ansible-playbook" if ansible else None
        if cmd == "smg":
            return "/usr/bin/smg" if smg else None
        return real_which(cmd, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(shutil, "which", which)
    started: list = []
    monkeypatch.setattr(fleet_router, "ensure_router", lambda *args, **kw: started.append(args))
    state = tmp_path / "state"
    argv = ["--state-dir", str(state), "fleet", "apply", *options, str(tmp_path / "fleet-demo.yaml")]
    result = CliRunner().invoke(main, argv)
    assert not (state / "fleet").exists()
    return f"{result.exit_code} {result.output}", started


def test_no_ansible_playbook_is_refused_before_the_router_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said, started = _apply(tmp_path, monkeypatch, False, "--traffic-timeout", "30s")
    assert said.startswith("2 ") and "ansible-playbook is not installed: pip install 'kimik3[fleet]'" in said
    assert started == []


def test_a_wheelhouse_without_kimik3_is_refused_before_the_router_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "wheels").mkdir()
    said, started = _apply(tmp_path, monkeypatch, True, "--install", str(tmp_path / "wheels"))
    assert said.startswith("2 ") and "holds 0 kimik3 wheels" in said, said
    assert started == []


def test_no_smg_is_refused_before_the_lock_and_the_rollout_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to exit 1 from the router's start, after the fleet lock and rollout.json were written.
    said, started = _apply(tmp_path, monkeypatch, True, smg=False)
    assert said.startswith("2 ") and "smg is not installed: pip install 'kimik3[fleet]'" in said, said
    assert started == []
