"""The GPU probe (seed 000 step 1: a real container runs nvidia-smi with the GPUs): its parsers, how GPUs are
requested (CDI or the nvidia runtime), and the probe step on fakes: first, once, refusing with the fix.
This machine has no GPU; the real-dockerd refusal is tests/integration/test_gpu_probe_docker.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, fake_orchestrator

from kimik3_reconciler.adapters.docker_engine import _device_requests
from kimik3_reconciler.errors import GpuProbeFailed, PermanentError, PlanError
from kimik3_reconciler.model.facts import DockerGpus
from kimik3_reconciler.model.gpu_request import head_request
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import ContainerSpec
from kimik3_reconciler.observe.docker_objects import (
    parse_cdi_kind,
    parse_gpu_plumbing,
    parse_gpus,
    parse_toolkit_version,
)
from kimik3_reconciler.planning.launch import container_fingerprint
from kimik3_reconciler.steps.gpu_probe import parse_gpu_listing

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CDI_YAML = '---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: "0"\n'
CDI_JSON = json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": []})
FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard" * 10}
GPU_PROFILE = FAKE_PROFILE.replace("variant: cpu, cpu_features: []", 'cuda_architectures: ["90"]').replace(
    "gpus: none", "gpus: all"
)


def test_the_toolkit_version_and_cdi_kind_are_read_from_what_the_tools_print() -> None:
    assert parse_toolkit_version("NVIDIA Container Toolkit CLI version 1.17.4\ncommit: 9b69590\n") == "1.17.4"
    assert parse_toolkit_version("cli-version: 1.16.2\nlib-version: 1.16.2\n") == "1.16.2"
    assert parse_toolkit_version("") is None
    assert parse_cdi_kind(CDI_YAML) == parse_cdi_kind(CDI_JSON) == "nvidia.com/gpu"
    assert parse_cdi_kind("cdiVersion: 0.5.0\nkind: vendor.com/fpga\n") == "vendor.com/fpga"


def test_cdi_is_used_only_when_a_spec_declares_gpus_and_the_daemon_reads_cdi() -> None:
    specs = {"/etc/cdi/nvidia.yaml": CDI_YAML, "/etc/cdi/other.yaml": "kind: vendor.com/fpga\n"}
    seen = parse_gpu_plumbing(
        {"CDISpecDirs": ["/etc/cdi", "/var/run/cdi"], "Runtimes": {"runc": {}}},
        specs,
        "NVIDIA Container Toolkit CLI version 1.17.4",
        hook=False,
    )
    assert (head_request(seen, "all"), seen.cdi_specs, seen.toolkit_version) == (
        "cdi",
        ("/etc/cdi/nvidia.yaml",),
        "1.17.4",
    )
    assert seen.cdi_devices is None  # a daemon that lists none: the spec of the kind is what there is
    # Docker 27+ with CDI turned off lists no dirs; Docker 20 (this machine's) cannot do CDI at all.
    off = parse_gpu_plumbing({"CDISpecDirs": [], "Runtimes": {"nvidia": {}}}, specs, "", hook=True)
    old = parse_gpu_plumbing({"ServerVersion": "20.10.24+dfsg1", "Runtimes": {"nvidia": {}}}, specs, "", hook=True)
    assert head_request(off, "all") == head_request(old, "all") == "runtime"
    assert head_request(parse_gpu_plumbing({"ServerVersion": "26.1.0"}, specs, "", hook=False), "all") == "cdi"
    bare = parse_gpu_plumbing({"ServerVersion": "28.2.2", "Runtimes": {"runc": {}}}, {}, "", hook=False)
    assert bare.cdi_devices == () and head_request(bare, "all") is None


def test_the_toolkits_hook_alone_gives_gpus_as_a_registered_runtime_does() -> None:
    """dockerd gives `--gpus` through nvidia-container-runtime-hook on its PATH, no runtime registered (moby's nvidia
    device driver): such a host asks that way, as does one with the runtime; the node check decides the same."""
    info = {"ServerVersion": "28.2.2", "Runtimes": {"runc": {}}, "CDISpecDirs": ["/etc/cdi"], "DiscoveredDevices": []}
    hook_only = parse_gpu_plumbing(info, {}, "", hook=True)
    assert head_request(hook_only, "all") == head_request(hook_only, ("0", "1")) == "runtime"
    assert head_request(parse_gpu_plumbing(info, {}, "", hook=False), "all") is None
    # The daemon's own device list wins over the spec files: it lists nvidia.com/gpu=0 only.
    listed = {**info, "DiscoveredDevices": [{"Source": "cdi", "ID": "nvidia.com/gpu=0"}]}
    both = parse_gpu_plumbing(listed, {"/etc/cdi/nvidia.yaml": CDI_YAML}, "", hook=True)
    assert (head_request(both, ("0",)), head_request(both, "all")) == ("cdi", "runtime")
    # A node's Docker, read through its API alone, has the same fields and gets the same answer.
    api = DockerGpus(runtime=False, hook=None, reads_cdi=True, cdi_devices=("nvidia.com/gpu=0",))
    assert (head_request(api, ("0",)), head_request(api, "all")) == ("cdi", None)


def test_cdi_and_runtime_requests_read_back_as_the_same_gpus_and_fingerprint() -> None:
    spec = ContainerSpec("k3", "i", ("-m", "x"), (), (), "all", ())
    cdi = replace(spec, gpu_request="cdi")
    assert [(r["Driver"], r["DeviceIDs"]) for r in _device_requests(cdi)] == [("cdi", ["nvidia.com/gpu=all"])]
    assert _device_requests(spec)[0]["Count"] == -1 and _device_requests(spec)[0]["Capabilities"] == [["gpu"]]
    listed = replace(cdi, gpus=("0", "GPU-1234"))
    assert _device_requests(listed)[0]["DeviceIDs"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1234"]
    assert _device_requests(replace(spec, gpus="none")) == []
    # What dockerd stores for the seed's `--device nvidia.com/gpu=all`, and for a listed subset.
    assert (
        parse_gpus([{"Driver": "cdi", "Count": 0, "DeviceIDs": ["nvidia.com/gpu=all"], "Capabilities": None}]) == "all"
    )
    assert parse_gpus([{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1234"]}]) == (
        "0",
        "GPU-1234",
    )
    # The host's plumbing is not what runs: a host that gains CDI does not reload its model.
    assert container_fingerprint(cdi, "fp") == container_fingerprint(spec, "fp")


def test_the_listing_parser_reads_nvidia_smi() -> None:
    listing = (
        "GPU 0: NVIDIA H200 (UUID: GPU-3c0a63ee-96ec-f1b9-4c6e-b02c2b40b3c5)\n"
        "GPU 1: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-a1b2c3d4-0000-1111-2222-333344445555)\n"
    )
    assert parse_gpu_listing(listing) == (
        "GPU-3c0a63ee-96ec-f1b9-4c6e-b02c2b40b3c5",
        "GPU-a1b2c3d4-0000-1111-2222-333344445555",
    )
    assert parse_gpu_listing("Failed to initialize NVML: Unknown Error\n") == ()


@pytest.fixture
def gpu_world(tmp_path: Path):
    """An orchestrator on fakes with the H200 host (NVML fixture: 1 GPU, driver 580.159.04) and a CDI spec."""
    orchestrator, ports, docker, hub = fake_orchestrator(tmp_path, FILES)
    ports.host.nvml_dump = json.loads((FIXTURES / "h200" / "nvml.json").read_text())
    ports.host.cdi = {"/etc/cdi/nvidia.yaml": CDI_YAML}
    ports.host.toolkit = "NVIDIA Container Toolkit CLI version 1.17.4\n"
    # Docker 28.2+ lists the devices it found in the spec (`nvidia-ctk cdi generate` on a 1-GPU host: 0 and all).
    devices = [{"Source": "cdi", "ID": "nvidia.com/gpu=0"}, {"Source": "cdi", "ID": "nvidia.com/gpu=all"}]
    docker.info = lambda: {
        "ServerVersion": "28.2.2",
        "CDISpecDirs": ["/etc/cdi"],
        "Runtimes": {"runc": {}},
        "DiscoveredDevices": devices,
    }
    return orchestrator, docker, hub


def test_the_probe_runs_first_through_cdi_once_and_every_container_asks_alike(gpu_world) -> None:
    orchestrator, docker, _ = gpu_world
    profile = parse_profile(GPU_PROFILE, "p.yaml")
    first = orchestrator.plan(profile).changes[0]
    assert (first.kind, first.target) == ("gpu", "CDI (--device nvidia.com/gpu=all)")
    orchestrator.apply(profile)
    probe = docker.one_shots[0]
    assert (probe.entrypoint, probe.command, probe.gpus, probe.gpu_request) == (("nvidia-smi",), ("-L",), "all", "cdi")
    assert probe.image == "nvidia/cuda:13.0.0-runtime-ubuntu24.04"  # nothing built yet: the runtime base
    assert docker.calls.index("oneshot k3-test-gpu-probe") < docker.calls.index(
        "build kimi-k3-llamacpp:mainline-ad1de39"
    )
    record = orchestrator.ports.state.read("gpu-probe/driver-580.159.04/toolkit-1.17.4/cdi-all-of-1.json")
    assert record["passed"] and record["seen"] == "1 GPU(s): GPU-00000000-0000-0000-0000-000000000000"
    assert docker.containers["k3-test"]["spec"].gpu_request == "cdi"
    again = orchestrator.plan(profile)
    assert [(s.kind, s.action.name) for s in again.steps][0] == ("gpu", "NOOP") and not again.changes
    # Review of issue 14: the record names the GPUs probed. `gpus: all` passing on this 1-GPU host says
    # nothing of a host with more (the count is in the key), nor of a listed subset probed with other ids.
    assert (
        orchestrator.plan(parse_profile(GPU_PROFILE.replace("gpus: all", "gpus: [0]"), "p.yaml")).changes[0].kind
        == "gpu"
    )
    # A toolkit upgrade is another key: probed again, before anything else.
    orchestrator.ports.host.toolkit = "NVIDIA Container Toolkit CLI version 1.18.0\n"
    assert orchestrator.plan(profile).changes[0].kind == "gpu"


def test_without_cdi_the_runtime_is_probed_and_used(gpu_world) -> None:
    orchestrator, docker, _ = gpu_world
    orchestrator.ports.host.cdi = {}
    docker.info = lambda: {"ServerVersion": "28.2.2", "CDISpecDirs": ["/etc/cdi"], "Runtimes": {"nvidia": {}}}
    orchestrator.apply(parse_profile(GPU_PROFILE.replace("gpus: all", "gpus: [0]"), "p.yaml"))
    assert docker.one_shots[0].gpu_request == "runtime" and docker.one_shots[0].gpus == ("0",)
    assert orchestrator.ports.state.read("gpu-probe/driver-580.159.04/toolkit-1.17.4/runtime-gpus-0.json")["passed"]


def test_a_failing_probe_refuses_with_the_command_and_the_fix_and_changes_nothing(gpu_world) -> None:
    orchestrator, docker, hub = gpu_world
    docker.gpu_probe_error = PermanentError('docker: could not select device driver "cdi" with capabilities: []')
    with pytest.raises(GpuProbeFailed) as failed:
        orchestrator.apply(parse_profile(GPU_PROFILE, "p.yaml"))
    message = str(failed.value)
    assert failed.value.exit_code == 3
    assert (
        "`docker run --rm --device nvidia.com/gpu=all --entrypoint nvidia-smi "
        "nvidia/cuda:13.0.0-runtime-ubuntu24.04 -L` failed to start"
    ) in message
    assert "nvidia-ctk cdi generate" in message and 'could not select device driver "cdi"' in message
    assert not hub.downloads and not docker.builds and "run k3-test" not in docker.calls
    assert orchestrator.ports.state.read("gpu-probe/driver-580.159.04/toolkit-1.17.4/cdi-all-of-1.json") is None


def test_a_hook_dockerd_never_loaded_is_named_by_the_probes_fix(gpu_world) -> None:
    """The toolkit installed after dockerd started: its hook is on disk (so `--gpus` is chosen), but moby registers
    its nvidia device driver only when dockerd starts, so `--gpus` fails with no driver for the `gpu` capability.
    The fix the probe names is the restart, not a runtime that `--gpus` does not go through."""
    orchestrator, docker, _ = gpu_world
    orchestrator.ports.host.cdi, orchestrator.ports.host.hook = {}, True
    docker.info = lambda: {"ServerVersion": "28.2.2", "CDISpecDirs": ["/etc/cdi"], "Runtimes": {"runc": {}}}
    docker.gpu_probe_error = PermanentError('docker: could not select device driver "" with capabilities: [[gpu]]')
    with pytest.raises(GpuProbeFailed) as failed:
        orchestrator.apply(parse_profile(GPU_PROFILE, "p.yaml"))
    message = str(failed.value)
    assert "`docker run --rm --gpus all --entrypoint nvidia-smi" in message
    assert "restart dockerd" in message and "nvidia-container-runtime-hook" in message
    assert "when it starts" in message


def test_a_container_that_sees_fewer_gpus_than_asked_fails_the_probe(gpu_world) -> None:
    orchestrator, docker, _ = gpu_world
    docker.host_gpus = 0  # e.g. a stale CDI spec after a driver upgrade: nvidia-smi lists nothing
    with pytest.raises(GpuProbeFailed, match=r"listed 0 GPU\(s\), the profile asks for 1"):
        orchestrator.apply(parse_profile(GPU_PROFILE, "p.yaml"))


def test_the_cpu_variant_never_looks_at_gpu_plumbing(gpu_world) -> None:
    orchestrator, docker, _ = gpu_world
    plan = orchestrator.plan(parse_profile(FAKE_PROFILE, "p.yaml"))
    assert "gpu" not in [s.kind for s in plan.steps]
    orchestrator.apply(parse_profile(FAKE_PROFILE, "p.yaml"))
    assert not any(s.entrypoint == ("nvidia-smi",) for s in docker.one_shots)


def test_the_probe_record_key_names_the_gpus_probed() -> None:
    """Review of issue 14: `gpus: [0, 1]` passing must not satisfy a later `gpus: all` (nor GPU 5)."""
    from kimik3_reconciler.model.records import gpu_probe_key

    pair = gpu_probe_key("580.159.04", "1.17.4", "cdi", ("0", "1"), 8)
    assert pair == "gpu-probe/driver-580.159.04/toolkit-1.17.4/cdi-gpus-0_1.json"
    assert (
        gpu_probe_key("580.159.04", "1.17.4", "cdi", "all", 8)
        == "gpu-probe/driver-580.159.04/toolkit-1.17.4/cdi-all-of-8.json"
    )
    assert (
        len(
            {
                pair,
                gpu_probe_key("580.159.04", "1.17.4", "cdi", "all", 8),
                gpu_probe_key("580.159.04", "1.17.4", "cdi", "all", 4),
                gpu_probe_key("580.159.04", "1.17.4", "cdi", ("5",), 8),
            }
        )
        == 4
    )


def test_gpus_all_with_a_draft_off_the_last_gpu_is_refused_at_plan_time_with_file_and_line(gpu_world) -> None:
    """Review of issue 14: with `gpus: all` the profile rules cannot count the GPUs; the host gate does (this
    recorded host has 1 GPU, so the draft must be CUDA0) and the orchestrator names the field's file:line."""
    orchestrator, docker, hub = gpu_world
    text = GPU_PROFILE.replace("archive: src.tar.gz}", "archive: src.tar.gz, patches: [rs.patch]}").replace(
        "parallel: 2}", "parallel: 2,\n  spec_draft: {model: draft.gguf, device: CUDA3}}"
    )
    (orchestrator.base_dir / "draft.gguf").write_bytes(b"GGUF")
    (orchestrator.base_dir / "rs.patch").write_text(
        "--- a/src/llama-memory-recurrent.cpp\n+++ b/src/llama-memory-recurrent.cpp\n@@ -1 +1,2 @@\n int x;\n"
        "+bool rollback_to(int seq);\n"
    )
    with pytest.raises(PlanError) as refused:
        orchestrator.plan(parse_profile(text, "interactive.yaml"))
    message = str(refused.value)
    assert (
        "serve.spec_draft.device must be CUDA0 (the GPU holding output.weight, the last of the split): it is "
        "CUDA3" in message
    )
    assert message.endswith("at interactive.yaml:8: serve.spec_draft.device")
    assert not hub.downloads and not docker.builds
