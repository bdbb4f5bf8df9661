"""Pure parsers on recorded real outputs (tests/fixtures): docker inspect, lscpu, /proc/cpuinfo."""

from __future__ import annotations

import json
from pathlib import Path

from kimik3_reconciler.observe.docker_objects import parse_container, parse_image
from kimik3_reconciler.observe.host import (
    parse_cpu_flags,
    parse_cpuinfo_cpus,
    parse_lscpu_cores,
    parse_lscpu_cpus,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def fixture(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


def test_running_container_recorded_from_dockerd() -> None:
    fact = parse_container(json.loads(fixture("docker", "container-running.json")))
    assert fact.name == "kimi-k3-demo" and fact.state == "running" and fact.exit_code is None
    assert fact.fingerprint and len(fact.fingerprint) == 16
    assert fact.inputs["serve.ubatch"] == 4096 and fact.inputs["model.quant"] == "UD-Q2_K_XL"
    assert fact.image == "kimi-k3-llamacpp:mainline-ad1de39-cpu"


def test_killed_container_recorded_from_dockerd() -> None:
    fact = parse_container(json.loads(fixture("docker", "container-killed.json")))
    assert fact.state == "exited" and fact.exit_code == 137


def test_image_recorded_from_dockerd() -> None:
    fact = parse_image(json.loads(fixture("docker", "image-cpu.json")))
    assert fact.tags == ("kimi-k3-llamacpp:mainline-ad1de39-cpu",)
    assert fact.fingerprint == fact.labels["kimik3.image.fingerprint"]
    assert json.loads(fact.labels["kimik3.image.inputs"])["build.variant"] == "cpu"


def test_hand_edited_inputs_label_does_not_crash() -> None:
    inspect = json.loads(fixture("docker", "container-running.json"))
    inspect["Config"]["Labels"]["kimik3.inputs"] = "{not json"
    assert parse_container(inspect).inputs == {}


def test_lscpu_counts_physical_cores_not_threads() -> None:
    assert parse_lscpu_cores(fixture("host", "lscpu-p-core-socket.dev-2core.txt")) == 2
    # two sockets, two hardware threads per core: 4 physical cores, 8 CPUs
    smt = "# Core,Socket\n0,0\n0,0\n1,0\n1,0\n2,1\n2,1\n3,1\n3,1\n"
    assert parse_lscpu_cores(smt) == 4
    assert parse_lscpu_cores("") == 1


def test_logical_cpus_count_every_hardware_thread() -> None:
    """What `nproc` counts, the image compile's `-j`: the pre-read planner's compile memory share (R3)."""
    smt = "# Core,Socket\n0,0\n0,0\n1,0\n1,0\n2,1\n2,1\n3,1\n3,1\n"
    assert parse_lscpu_cpus(smt) == 8 and parse_lscpu_cpus("# Core,Socket\n") is None
    cpuinfo = "".join(f"processor\t: {i}\nphysical id\t: 0\ncore id\t\t: {i // 2}\n\n" for i in range(6))
    assert parse_cpuinfo_cpus(cpuinfo) == 6 and parse_cpuinfo_cpus("") is None


def test_cpu_flags_recorded_on_the_dev_machine() -> None:
    flags = parse_cpu_flags(fixture("host", "cpuinfo-flags.dev-epyc.txt"))
    assert "avx512f" in flags and "avx2" in flags and "amx_tile" not in flags


def _section(text: str, title: str) -> str:
    """One `## title` section of tests/fixtures/h200/host.txt (recorded by tools/gpu_proof/run.sh)."""
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_h200_host_recorded_facts() -> None:
    host = fixture("h200", "host.txt")
    assert parse_lscpu_cores(_section(host, "lscpu -p=CORE,SOCKET")) == 16
    flags = parse_cpu_flags(_section(host, "cpuinfo flags"))
    assert {"avx512f", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"} <= set(flags)
    assert _section(host, "numa_balancing").strip() == "0"


def test_cmake_args_rendered_for_sm90_match_the_h200_build() -> None:
    """The cmake arguments of the native CUDA build that served the tiny model on an H200
    (tests/fixtures/h200/build.txt, probe.txt) are what kimik3 renders today for that profile."""
    from kimik3_reconciler.engines.llamacpp.build_flags import cmake_configure_args
    from kimik3_reconciler.model.facts import HostFacts
    from kimik3_reconciler.model.profile_source import parse_profile

    host = fixture("h200", "host.txt")
    facts = HostFacts(
        physical_cores=parse_lscpu_cores(_section(host, "lscpu -p=CORE,SOCKET")),
        cpu_flags=parse_cpu_flags(_section(host, "cpuinfo flags")),
    )
    root = Path(__file__).resolve().parents[3]
    profile = parse_profile((root / "tools" / "gpu_proof" / "h200-tiny.yaml").read_text()).profile
    recorded = json.loads(fixture("h200", "rendered.json"))
    # That build predates the RPC backend every image now carries (issue 18): the rest is unchanged.
    rendered = list(cmake_configure_args(profile, facts))
    assert "-DGGML_RPC=ON" in rendered and "-DGGML_RPC=ON" not in recorded["cmake_args"]
    assert [a for a in rendered if a != "-DGGML_RPC=ON"] == recorded["cmake_args"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in recorded["cmake_args"]
    assert "b11434-ad1de39" in fixture("h200", "probe.txt")  # the build number/commit reached the server
    assert "offloaded 5/5 layers to GPU" in fixture("h200", "server.log")


def test_load_phase_from_recorded_server_log() -> None:
    from kimik3_reconciler.steps.health import load_phase

    log = fixture("h200", "server.log")
    upto = log[: log.index("\n", log.index("offloaded 5/5 layers to GPU"))]
    assert load_phase(upto).startswith("load_tensors: offloaded 5/5 layers to GPU")
    assert load_phase("") == "starting"


def test_h200_draft_run_used_the_argv_kimik3_renders_today() -> None:
    """tools/gpu_proof/run-draft.sh served a tiny target with a tiny draft on an H200, with the
    argv rendered for tools/gpu_proof/h200-draft.yaml; the draft loaded on the derived device."""
    from support.observed import local_inputs, model_fact, observed

    from kimik3_reconciler.model.facts import HostFacts
    from kimik3_reconciler.model.profile_source import parse_profile
    from kimik3_reconciler.planning.launch import render_launch

    recorded = json.loads(fixture("h200", "rendered-draft.json"))
    root = Path(__file__).resolve().parents[3]
    profile = parse_profile((root / "tools" / "gpu_proof" / "h200-draft.yaml").read_text()).profile
    facts = observed(
        profile,
        host=HostFacts(**recorded["host"]),
        inputs=local_inputs(profile, draft_model=".gpu_proof/Kimi-K3-tiny-draft.gguf"),
        model=model_fact(profile, size=1, stem="Kimi-K3-tiny", cache_dir="/models-cache"),
    )
    assert list(render_launch(profile, facts, "img", "fp").spec.command) == recorded["argv"]
    log = fixture("h200", "draft-server.log")
    assert "adding speculative implementation 'draft-simple'" in log and "devices=[CUDA0]" in log
    drafts = [
        ln
        for ln in fixture("h200", "draft-probe.txt").splitlines()
        if ln.startswith("llamacpp:spec_decode_num_drafts_total")
    ]
    assert drafts and int(drafts[0].split()[-1]) > 0


def test_the_mount_of_a_path_from_recorded_mount_tables() -> None:
    from kimik3_reconciler.observe.host import parse_mount_of

    dev = fixture("host", "proc-self-mounts.dev.txt")  # this dev machine's /proc/self/mounts
    root = parse_mount_of(dev, "/var/lib/kimik3/hub")
    assert root is not None and (root.mountpoint, root.fstype, root.source) == ("/", "ext4", "/dev/vda")
    docker = parse_mount_of(dev, "/var/lib/docker/volumes/x")
    assert docker is not None and docker.mountpoint == "/var/lib/docker"
    nfs = fixture("host", "proc-self-mounts.nfs-models.txt")  # the same plus an nfs4 and a nested local mount
    hub = parse_mount_of(nfs, "/mnt/models/hub")
    assert hub is not None and (hub.fstype, hub.source, hub.mountpoint) == (
        "nfs4",
        "nas01.lan:/export/models",
        "/mnt/models",
    )
    scratch = parse_mount_of(nfs, "/mnt/models/local scratch/hub")  # the kernel writes the space as \040
    assert scratch is not None and (scratch.fstype, scratch.mountpoint) == ("xfs", "/mnt/models/local scratch")
    assert parse_mount_of(nfs, "/mnt/modelsX") is not None and parse_mount_of(nfs, "/mnt/modelsX").mountpoint == "/"
    assert parse_mount_of("", "/x") is None


def test_an_image_env_variable_from_a_recorded_inspect() -> None:
    from kimik3_reconciler.observe.docker_objects import image_env

    image = json.loads(fixture("docker", "image-cpu.json"))  # a kimik3 CPU image on a Debian base: no CUDA
    assert image_env(image, "PATH") and image_env(image, "CUDA_VERSION") is None
    assert image_env(None, "CUDA_VERSION") is None
