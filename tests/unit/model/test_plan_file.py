"""Saved plans as data: every payload type survives JSON exactly; a plan file is told from a profile by content."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model import specs
from kimik3_reconciler.model.facts import FileStat, RemoteFile
from kimik3_reconciler.model.plan import Action, DiffItem, Step
from kimik3_reconciler.model.plan_file import (
    SavedPlan,
    content_digest,
    payload_from_json,
    payload_to_json,
    read_saved_plan,
    write_saved_plan,
)

FILES = (
    RemoteFile(path="Q/a-00001-of-00002.gguf", size=50 << 30, sha256="ab" * 32),
    RemoteFile(path="config.json", size=120, git_oid="cd" * 20),
)
DOWNLOAD = specs.ModelDownload(
    "org/k3",
    "ef" * 20,
    "UD-Q2_K_XL",
    "http://127.0.0.1:19150",
    "/cache",
    FILES,
    ("Q/a-00001-of-00002.gguf",),
    "models/org--k3/x.json",
)
SPEC = specs.ContainerSpec(
    name="k3",
    image="kimi-k3-llamacpp:x",
    command=("--model", "/models/a.gguf", "--threads", "8"),
    env=(("LLAMA_ARG_X", "1"),),
    mounts=(specs.Mount("/cache", "/models"), specs.Mount("/k", "/key", False)),
    gpus=("0", "GPU-1234"),
    labels=(("kimik3.profile", "k3"),),
    restart_policy="no",
)


def helper_unit(role: str) -> specs.UnitInstall:
    """The unit of k3's helper `role` (metrics: the exporter, front: the front), enabled and restarted."""
    return specs.UnitInstall(
        f"k3-{role}.service",
        "k3",
        f"/etc/systemd/system/k3-{role}.service",
        "[Unit]\n",
        f"/etc/kimik3/k3-{role}.env",
        "KIMIK3_PROFILE=k3\n",
        False,
        True,
        True,
        True,
        restart=True,
    )


FRONT = specs.FrontRun(
    "k3",
    {"profile": "k3", "bind": "127.0.0.1", "port": 8080, "server_url": "http://127.0.0.1:18080"},
    "0123456789abcdef",
    "http://127.0.0.1:8080/.kimik3/front/healthz",
    replace_pid=4343,
)
BUILD = specs.ImageBuild(
    "kimi-k3-llamacpp:x",
    "fp1",
    "mainline",
    "ad1de39",
    "/d/Dockerfile.llamacpp",
    "/a.tar.gz",
    None,
    (("01-x.patch", "/p/x.patch"),),
    (("CMAKE_ARGS", "-DGGML_CUDA=OFF"),),
    (("kimik3.image", "x"),),
    variant="cpu",
)
SAMPLES = [
    DOWNLOAD,
    specs.ModelDownload("org/k3", "ef" * 20, "tokenizer", None, "/cache", (), (), "k"),
    specs.RemoveModelFiles(DOWNLOAD),
    specs.LocalModelVerify(
        "/srv/models/reap770.gguf",
        "/srv/models",
        "UD-Q2_K_XL-REAP770",
        FILES,
        (FileStat(path="Q/a-00001-of-00002.gguf", size=1, mtime_ns=2, ctime_ns=3, inode=4),),
        "models/local/x.json",
    ),
    BUILD,
    replace(
        BUILD,
        archive_sha256="ab" * 32,
        patches=(),
        build_args=(),
        labels=(),
        variant="cuda",
        preread=specs.PagecachePreread(("/c/models--org--k3/snapshots/r/Q2/a.gguf",), 3 << 40),
    ),
    specs.RetagImage("sha256:" + "1" * 64, "kimi-k3-llamacpp:x"),
    specs.ImagePull(
        "vllm/vllm-openai:kimi-k3@sha256:" + "2" * 64, "vllm/vllm-openai@sha256:" + "2" * 64, "sha256:" + "2" * 64
    ),
    specs.RemoveImage("kimi-k3-llamacpp:old"),
    specs.LaunchContainer(SPEC, replace=True),
    specs.LaunchContainer(
        specs.ContainerSpec("g", "i", ("a",), (), (), "all", (), entrypoint=("/app/llama-perplexity",))
    ),
    specs.LaunchContainer(specs.ContainerSpec("c", "i", (), (), (), "none", ())),
    specs.StartContainer("k3"),
    specs.StopContainer("other"),
    specs.RemoveContainer("k3"),
    specs.RemoveVolume("kimik3-slots-k3"),
    specs.ForgetDeployment(("last-good/k3.json", "unverified/k3.json")),
    specs.SmokeTest("k3-smoke", "kimi-k3-llamacpp:x", "fp1", ("--ctx-size", "512"), "none", (("kimik3.smoke", "1"),)),
    specs.QuantGateRun(
        "i",
        "fp1",
        "/c/models--org--k3",
        "snapshots/r/Q4/a.gguf",
        "/c/models--org--k3",
        "snapshots/r/Q2/a.gguf",
        "ef" * 20,
        ("0",),
        ("--numa", "distribute", "--fit", "on"),
        ("--threads", "16"),
        0.05,
        0.9,
        "gate/k",
        "gate-logits/k",
    ),
    specs.GpuProbe(
        "k3-gpu-probe",
        "nvidia/cuda:13.0.0-runtime-ubuntu24.04",
        ("0", "GPU-1234"),
        "cdi",
        2,
        "gpu-probe/driver-580/toolkit-1.17.4/cdi.json",
        "580.159.04",
        None,
        (("kimik3.role", "gpu-probe"),),
    ),
    specs.HealthWait("k3", "http://127.0.0.1:19150/health", 1234.5, model_bytes=3 << 40, warm=True),
    specs.PagecachePreread(("/c/models--org--k3/snapshots/r/Q2/a.gguf",), 3 << 40, workers=4),
    specs.UnitInstall(
        "kimi-k3.service",
        "k3",
        "/etc/systemd/system/kimi-k3.service",
        "[Unit]\n# 100%\n",
        "/etc/kimik3/e",
        'KIMIK3_CONTAINER="k3 x"\n',
        True,
        True,
        False,
        True,
    ),
    specs.UnitRemoval("old.service", "/etc/systemd/system/old.service", None, systemctl=False),
    specs.StopUnit("other.service"),
    specs.HostSettings(
        "/etc/sysctl.d/90-kimik3.conf",
        "# kimik3\nkernel.numa_balancing = 0\n",
        (("kernel.numa_balancing", "0"),),
        write=False,
    ),
    specs.WorkerImage(
        specs.DockerHost("w1", "ssh://k3@10.0.0.2"),
        specs.ImageBuild(
            "kimi-k3-llamacpp:x", "fp1", "mainline", "ad1de39", "/d/Dockerfile.llamacpp", "/a.tar.gz", None, (), (), ()
        ),
        123456,
    ),
    specs.WorkerImage(
        specs.DockerHost("w2", "tcp://10.0.0.3:2376", "/etc/k3/tls"),
        specs.ImageBuild("t", "fp1", "mainline", "c", "/d", "/a", None, (), (), ()),
        0,
        retag_id="sha256:" + "2" * 64,
    ),
    specs.WorkerLaunch(
        specs.DockerHost("w1", "ssh://k3@10.0.0.2"),
        specs.ContainerSpec(
            "k3-rpc-w1",
            "kimi-k3-llamacpp:x",
            ("-H", "10.0.0.2", "-p", "50052", "-c"),
            (("LLAMA_CACHE", "/rpc-cache"),),
            (),
            "none",
            (),
            entrypoint=("/app/ggml-rpc-server",),
            volumes=(("kimik3-rpc-cache-k3-w1", "/rpc-cache"),),
        ),
        replace=True,
    ),
    specs.WorkerWait(specs.DockerHost("w1", "ssh://k3@10.0.0.2"), "k3-rpc-w1", "10.0.0.2", 50052, 120.0),
    specs.WorkerRemove(specs.DockerHost("w1", "ssh://k3@10.0.0.2"), "k3-rpc-w1", "k3"),
    specs.WorkerVolumeRemove(specs.DockerHost("w1", "ssh://k3@10.0.0.2"), "kimik3-rpc-cache-k3-w1"),
    specs.MemberImage(
        specs.DockerHost("n2", "ssh://k3@10.0.0.2"),
        specs.ImagePull(
            "vllm/vllm-openai:k3@sha256:" + "1" * 64, "vllm/vllm-openai@sha256:" + "1" * 64, "sha256:" + "1" * 64
        ),
    ),
    specs.MemberCheckpoint(
        specs.DockerHost("n2", "ssh://k3@10.0.0.2"),
        specs.ContainerSpec(
            "k3-node-n2-checkpoint",
            "vllm/vllm-openai:k3@sha256:" + "1" * 64,
            ("/models/snap",),
            (),
            (specs.Mount("/hub/models--o--m", "/models/models--o--m", read_only=True),),
            "none",
            (),
            network_mode="none",
            entrypoint=("python3", "-c", "print(1)"),
        ),
        "/models/snap",
        (("config.json", 700), ("model.safetensors", 4096)),
    ),
    specs.MemberLaunch(
        specs.DockerHost("n2", "ssh://k3@10.0.0.2"),
        specs.ContainerSpec(
            "k3-node-n2",
            "vllm/vllm-openai:k3@sha256:" + "1" * 64,
            ("start", "--address", "10.0.0.1:6379", "--block"),
            (("VLLM_HOST_IP", "10.0.0.2"),),
            (),
            ("0", "1"),
            (("kimik3.member.fingerprint", "abc"),),
            entrypoint=("ray",),
        ),
        replace=True,
    ),
    specs.MemberWait("k3", ("10.0.0.1", "10.0.0.2"), 300.0),
    specs.MemberRemove(specs.DockerHost("n2", "ssh://k3@10.0.0.2"), "k3-node-n2"),
    specs.ExporterRun(
        "k3",
        {"profile": "k3", "labels": {"profile": "k3"}, "port": 19201, "shards": ["/c/a.gguf"]},
        "0123456789abcdef",
        "http://127.0.0.1:19201/healthz",
        replace_pid=4242,
    ),
    specs.ExporterStop("k3", 4242),
    specs.ExporterUnit(
        "k3",
        {"profile": "k3", "port": 19201},
        "0123456789abcdef",
        "http://127.0.0.1:19201/healthz",
        helper_unit("metrics"),
        stop_pid=4242,
    ),
    specs.VerifyServer("k3", "0123456789abcdef"),
    FRONT,
    specs.FrontStop("k3", 4343),
    specs.FrontHold(
        "k3",
        "http://127.0.0.1:8080/.kimik3/front",
        {"drain_s": 60.0, "queue": 64, "wait_s": 900.0, "lease_s": 1020.0, "retry_after_s": 12},
    ),
    replace(FRONT, hand_over=True),
    specs.FrontUnit(
        "k3",
        {"profile": "k3", "bind": "127.0.0.1", "port": 8080, "server_url": "http://127.0.0.1:18080"},
        "0123456789abcdef",
        "http://127.0.0.1:8080/.kimik3/front/healthz",
        helper_unit("front"),
        stop_pid=4343,
    ),
]


def test_every_payload_type_has_a_sample() -> None:
    assert {type(p) for p in SAMPLES} == set(specs.PAYLOADS), "add a sample of the new payload type here"


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_every_payload_survives_json_exactly(payload) -> None:
    back = payload_from_json(json.loads(json.dumps(payload_to_json(payload))))
    assert back == payload and type(back) is type(payload)
    for f in fields(payload):  # exact: same types (tuples stay tuples, None stays None), not just equal
        assert repr(getattr(back, f.name)) == repr(getattr(payload, f.name)), f.name


def saved(steps: tuple[Step, ...] = ()) -> SavedPlan:
    return SavedPlan("/p/profile.yaml", "name: k3\n", {"container k3": "running"}, steps, "2026-12-03T04:00:00+00:00")


def test_a_saved_plan_reads_back_as_written() -> None:
    steps = (
        Step("model", "org/k3", Action.CREATE, "3 files missing", spec=DOWNLOAD, cost="50 GiB"),
        Step(
            "container",
            "k3",
            Action.REPLACE,
            "inputs changed",
            diff=(DiffItem("serve.port", 1, 2),),
            spec=specs.LaunchContainer(SPEC, replace=True),
            warnings=("w",),
        ),
        Step("health", "k3", Action.NOOP, "healthy"),
    )
    plan = saved(steps)
    back = read_saved_plan(write_saved_plan(plan), "plan.json")
    assert back == plan


def test_a_profile_is_not_a_saved_plan_and_a_foreign_version_is_refused() -> None:
    assert read_saved_plan("apiVersion: kimik3/v1\nname: k3\n", "p.yaml") is None
    assert read_saved_plan('{"name": "k3"}', "p.yaml") is None  # JSON, but not kimik3's plan format
    data = json.loads(write_saved_plan(saved()))
    data["version"] = 99
    with pytest.raises(InputError, match="plan.json: saved plan format version 99") as refused:
        read_saved_plan(json.dumps(data), "plan.json")
    assert refused.value.exit_code == 2
    data["version"] = 1
    data["steps"] = [{"kind": "x"}]
    data["content_digest"] = content_digest({k: v for k, v in data.items() if k != "content_digest"})
    with pytest.raises(InputError, match=r"plan.json: not a readable kimik3 saved plan \(step 1: target: missing\)"):
        read_saved_plan(json.dumps(data), "plan.json")


@pytest.mark.parametrize("keep", [40, 200, 0.5, -2], ids=["header", "early", "half", "last-brace"])
def test_a_truncated_saved_plan_is_named_as_one_not_parsed_as_a_yaml_profile(keep) -> None:
    """Held-back review: a plan cut short was read as a profile ("invalid YAML" at line 7)."""
    text = write_saved_plan(saved((Step("health", "k3", Action.NOOP, "healthy"),)))
    cut = text[: int(len(text) * keep) if isinstance(keep, float) else keep]
    with pytest.raises(
        InputError,
        match=r"^plan.json: a damaged kimik3 saved plan \(not complete JSON: .*, line \d+ "
        r"column \d+; truncated or edited\?\): make the plan again",
    ) as refused:
        read_saved_plan(cut, "plan.json")
    assert refused.value.exit_code == 2
