"""The fleet rig itself (tests/support/fleet_hosts.py, shared/TESTING.md §12): three namespace hosts, each reached
over real SSH with its own host key, each session talking to that host's own dockerd; an image pushed once from
this machine's daemon and pulled by digest by every host from the registry on the bridge; and nothing left behind
(namespaces, veths, the bridge, the daemons, their mounts) once the rig is gone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.fleet_hosts import BRIDGE, fleet_rig, publish_image, pull_everywhere

pytestmark = pytest.mark.docker


def _small_image(context: Path) -> str:
    context.mkdir()
    (context / "hello").write_text("fleet\n")
    (context / "Dockerfile").write_text("FROM scratch\nCOPY hello /hello\n")
    subprocess.run(
        ["docker", "build", "-q", "-t", "k3fl-rig-test:small", str(context)], check=True, capture_output=True
    )
    return "k3fl-rig-test:small"


def test_three_hosts_each_with_its_own_daemon_pull_one_image_by_digest(tmp_path: Path) -> None:
    tag = _small_image(tmp_path / "image")
    try:
        with fleet_rig(3, prefix="k3rt") as rig:
            daemon_ids = set()
            for host in rig.hosts:
                # Over SSH, as an operator's Ansible would: the session's docker is this host's daemon.
                seen = json.loads(rig.ssh(host, "docker", "info", "--format", "{{json .DockerRootDir}}").stdout)
                assert seen == json.loads(host.docker("info", "--format", "{{json .DockerRootDir}}"))
                daemon_ids.add(seen)
                addresses = rig.ssh(host, "ip", "-4", "-o", "addr", "show", "eth0").stdout
                assert f"inet {host.address}/24" in addresses
            assert len(daemon_ids) == 3
            ref = publish_image(rig, tag, "kimik3/rig-test")
            assert ref.startswith(f"{rig.registry}/kimik3/rig-test@sha256:")
            pull_everywhere(rig, ref)
            for host in rig.hosts:
                assert host.docker("image", "inspect", ref, "--format", "{{.Id}}").startswith("sha256:")
            netns_names = {h.name for h in rig.hosts}
            roots = [h.root for h in rig.hosts]
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not netns_names & {line.split()[0] for line in listed.splitlines() if line}
        assert subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0
        mounts = Path("/proc/self/mounts").read_text()
        assert not any(str(r) in mounts for r in roots)
        assert not any(r.exists() for r in roots)
    finally:
        subprocess.run(["docker", "rmi", tag], capture_output=True)
