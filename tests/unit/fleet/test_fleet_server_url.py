"""Where the router (and `fleet status`, `recover`, the Slurm target) reaches each host's server (fleet/server_load.py
`server_url`): the address the server binds, its own machine's address where it binds every address (a wildcard is no
address to dial: http://0.0.0.0 reaches the controller itself), 127.0.0.1 where it binds loopback; each host's model
mirror (the other hosts fetch from it) at the same address."""

from __future__ import annotations

import shutil
from pathlib import Path

from kimik3_reconciler.cli.fleet_apply import mirror_urls
from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.server_load import server_url

DEMO = Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml"
FLEET = """\
apiVersion: kimik3/v1
kind: Fleet
name: f
profile: demo-cpu.yaml
inventory:
  all:
    hosts:
      a: {ansible_host: 10.0.0.1}
      b: {ansible_host: "fd00::2"}
      c: {ansible_host: gpu-c.example}
      d: {ansible_host: 10.0.0.4}
      e: {ansible_host: 127.0.0.1}
overrides:
  a: {serve: {host: 0.0.0.0}}
  b: {serve: {host: "::"}}
  c: {serve: {host: 0.0.0.0}}
  d: {serve: {host: 10.0.0.44}}
router: {version: "1.13.0"}
"""


def test_each_host_is_reached_where_its_server_listens(tmp_path: Path) -> None:
    shutil.copy(DEMO, tmp_path / "demo-cpu.yaml")
    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.yaml"), read_text)
    port = fleet.host("a").profile.serve.port
    assert {h.name: server_url(h) for h in fleet.hosts} == {
        "a": f"http://10.0.0.1:{port}",
        "b": f"http://[fd00::2]:{port}",
        "c": f"http://gpu-c.example:{port}",
        "d": f"http://10.0.0.44:{port}",
        "e": f"http://127.0.0.1:{port}",
    }
    assert mirror_urls(fleet)["a"] == "http://10.0.0.1:8089"
    assert mirror_urls(fleet)["b"] == "http://[fd00::2]:8089"
