"""`fleet apply` without the `fleet` extra's ansible-playbook: refused (exit 2, naming it) before the fleet lock and
the router (it used to start the router, then stop at the playbook with "nothing touched")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3_reconciler.cli import fleet_router, main

ROOT = Path(__file__).parents[3]


def test_no_ansible_playbook_is_refused_before_the_router_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("demo-cpu.yaml", "fleet-demo.yaml"):
        shutil.copy(ROOT / "profiles" / name, tmp_path / name)
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda cmd, **kw: None if cmd == "ansible-playbook" else real_which(cmd, **kw))
    started = []
    monkeypatch.setattr(fleet_router, "ensure_router", lambda *args, **kw: started.append(args))
    state = tmp_path / "state"
    result = CliRunner().invoke(main, ["--state-dir", str(state), "fleet", "apply", str(tmp_path / "fleet-demo.yaml")])
    assert result.exit_code == 2, result.output
    assert "ansible-playbook is not installed: pip install 'kimik3[fleet]'" in result.output
    assert started == [] and not (state / "fleet").exists()
