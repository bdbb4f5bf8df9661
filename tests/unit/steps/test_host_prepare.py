"""Issue 27 item 5: host preparation. With `host: {prepare: true}` kimik3 persists kernel.numa_balancing = 0 in
its sysctl.d file and loads it (on fakes of the units port here; the real systemd-sysctl in
tests/integration/test_host_prepare_systemd.py); a second apply is a no-op. The NVIDIA kernel module is read from
/proc/driver/nvidia/version (recorded texts of both modules) and judged by the host gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

from kimik3_reconciler.errors import PermanentError, PlanError, ProfileError
from kimik3_reconciler.model.host_settings import SYSCTL_FILE, parse_sysctl, read_after, sysctl_text
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import HostSettings
from kimik3_reconciler.observe.host import parse_nvidia_module
from kimik3_reconciler.observe.host_settings import collect_host_settings
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.host_settings import apply_host_settings
from kimik3_reconciler.steps.report import NullReporter

# /proc/driver/nvidia/version as the two modules write it (580 series).
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:51:42 UTC 2025\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:57:40 UTC 2025\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PREPARED = FAKE_PROFILE + "host: {prepare: true}\n"
FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard" * 10}


def test_the_module_is_read_from_the_nvrm_line() -> None:
    assert parse_nvidia_module(OPEN) == "open"
    assert parse_nvidia_module(PROPRIETARY) == "proprietary"
    assert parse_nvidia_module(None) is None  # no module loaded: no file
    assert parse_nvidia_module("something else\n") is None  # an unknown format is not judged


@pytest.fixture
def world(tmp_path: Path):
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    ports.host.numa = "1\n"  # numa_balancing on, as a stock kernel has it
    ports.units.sysctl["kernel.numa_balancing"] = "1"
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), ports


def test_without_prepare_numa_balancing_on_is_refused_and_nothing_is_written(world) -> None:
    orchestrator, ports = world
    with pytest.raises(PlanError, match=r"host: \{prepare: true\}"):
        orchestrator.apply(parse_profile(FAKE_PROFILE, "test.yaml"))
    assert ports.units.calls == [] and SYSCTL_FILE not in ports.units.files


def test_prepare_persists_and_loads_it_first_and_a_second_apply_is_a_noop(world) -> None:
    orchestrator, ports = world
    profile = parse_profile(PREPARED, "test.yaml")
    first = orchestrator.plan(profile)
    assert (first.steps[0].kind, first.steps[0].action) == ("host", Action.CREATE)
    assert [str(d) for d in first.steps[0].diff] == ["kernel.numa_balancing: 1 → 0"]

    def kernel_follows_the_load(path: str) -> None:  # this host's /proc and systemd's are one
        load(path)
        ports.host.numa = ports.units.sysctl["kernel.numa_balancing"] + "\n"

    load, ports.units.sysctl_load = ports.units.sysctl_load, kernel_follows_the_load
    result = orchestrator.apply(profile)
    assert result.executed[0].kind == "host" and result.final.converged
    assert ports.units.files[SYSCTL_FILE] == sysctl_text()
    assert "kernel.numa_balancing = 0" in ports.units.files[SYSCTL_FILE].splitlines()
    assert ports.units.sysctl["kernel.numa_balancing"] == "0"
    calls = list(ports.units.calls)
    assert calls[:2] == [f"write {SYSCTL_FILE}", f"systemd-sysctl {SYSCTL_FILE}"]
    second = orchestrator.apply(profile)
    assert not second.changed and ports.units.calls == calls
    assert second.final.steps[0].action == Action.NOOP and "persisted in" in second.final.steps[0].reason


def test_a_load_that_leaves_another_value_fails_the_step(world) -> None:
    _, ports = world
    ports.units.sysctl_load = lambda path: None  # systemd-sysctl exits 0 yet /proc/sys keeps 1 (read-only there)
    with pytest.raises(PermanentError, match=r"kernel.numa_balancing is 1 \(wanted 0\)"):
        apply_host_settings(
            HostSettings(SYSCTL_FILE, sysctl_text(), (("kernel.numa_balancing", "0"),)), ports, NullReporter()
        )


def test_a_reload_does_not_rewrite_the_file(world) -> None:
    _, ports = world
    ports.units.files[SYSCTL_FILE] = sysctl_text()
    apply_host_settings(
        HostSettings(SYSCTL_FILE, sysctl_text(), (("kernel.numa_balancing", "0"),), write=False), ports, NullReporter()
    )
    assert ports.units.calls == [f"systemd-sysctl {SYSCTL_FILE}"] and ports.units.sysctl["kernel.numa_balancing"] == "0"


def test_the_section_takes_only_prepare() -> None:
    assert parse_profile(PREPARED, "test.yaml").profile.host.prepare is True
    assert parse_profile(FAKE_PROFILE, "test.yaml").profile.host.prepare is False
    with pytest.raises(ProfileError, match=r"host.sysctl"):
        parse_profile(FAKE_PROFILE + "host: {prepare: true, sysctl: {vm.swappiness: 1}}\n", "test.yaml")


def test_a_later_sysctl_file_that_sets_the_key_otherwise_is_found(world) -> None:
    _, ports = world
    files = ports.units.files
    files["/etc/sysctl.d/10-network-security.conf"] = "net.ipv4.conf.default.rp_filter = 2\n"
    files["/etc/sysctl.d/50-early.conf"] = "kernel.numa_balancing = 1\n"  # read before kimik3's: ours wins
    files["/usr/lib/sysctl.d/95-masked.conf"] = "kernel.numa_balancing = 1\n"  # masked by /etc's file of that name
    files["/etc/sysctl.d/95-masked.conf"] = "# emptied by the operator\n"
    files["/usr/lib/sysctl.d/99-tuning.conf"] = "-kernel/numa_balancing=1\n"  # '-' and '/' as systemd-sysctl reads them
    files["/etc/sysctl.d/99-sysctl.conf"] = "; the /etc/sysctl.conf link\nkernel.numa_balancing = 0\n"  # agrees
    facts = collect_host_settings(parse_profile(PREPARED, "test.yaml").profile, ports.units)
    assert facts is not None and facts.overridden_by == (
        ("/usr/lib/sysctl.d/99-tuning.conf", "kernel.numa_balancing", "1"),
    )
    assert collect_host_settings(parse_profile(FAKE_PROFILE, "test.yaml").profile, ports.units) is None  # not asked


def test_sysctl_files_parse_as_systemd_sysctl_reads_them() -> None:
    assert parse_sysctl(
        "# c\n; c\n kernel.numa_balancing = 0 \n-vm/swappiness=10\nnot a line\nkernel.numa_balancing=1\n"
    ) == {"kernel.numa_balancing": "1", "vm.swappiness": "10"}
    assert read_after("90-kimik3.conf", {"/etc/sysctl.d/90-kimik3.conf": "kernel.numa_balancing = 0\n"}) == ()
