"""`kimik3 routes` (issue 25 §4): which ways of serving Kimi-K3 a host can take, judged from its facts, for seed
000's host (8x RTX PRO 6000, 1 TiB RAM), an 8x B300 host, the recorded H200 x8, and this machine (no GPU: demo
only); the described-host file's refusals name the field (exit 2). The plan's own section: tests/cases/plan/12*-routes-*."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from support.recorded_hosts import h200_host

from kimik3_reconciler.cli import main
from kimik3_reconciler.engines.native_route import NATIVE_MIN_BYTES
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.described_host import described_host
from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.planning.routes import routes

HOSTS = Path(__file__).parents[2] / "fixtures" / "host"
PROFILES = Path(__file__).parents[3] / "profiles"
SEED_HOST = HOSTS / "described-seed-rtx-pro-6000.yaml"
B300_HOST = HOSTS / "described-b300.yaml"


def run(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        main,
        ["routes", *args],
        catch_exceptions=False,
        env={"KIMIK3_STATE_DIR": str(tmp_path / "state"), "KIMIK3_CACHE_DIR": str(tmp_path / "cache")},
    )
    return result.exit_code, result.stdout, result.stderr


def feasible(document: dict) -> dict[str, str]:
    """{engine model: placement} of the feasible routes."""
    return {f"{r['engine']} {r['model']}": r["placement"] for r in document["routes"] if r["feasible"]}


def test_seed_host_gguf_routes_and_no_native(tmp_path: Path) -> None:
    code, out, _ = run(["--json", "--host-facts", str(SEED_HOST)], tmp_path)
    assert code == 0
    document = json.loads(out)
    assert document["host"]["vram_bytes"] == 8 * int(95.625 * (1 << 30))  # seed 000: 765 GiB
    # Seed 000 step 2: Q2_K_XL is the hybrid, IQ2_XXS and REAP770 fit the VRAM; seed 001's 1-bit quants fit too.
    assert feasible(document) == {
        "llamacpp unsloth/Kimi-K3-GGUF:UD-Q2_K_XL": "hybrid",
        "llamacpp unsloth/Kimi-K3-GGUF:UD-IQ2_XXS": "all-vram",
        "llamacpp unsloth/Kimi-K3-GGUF:UD-Q2_K_XL-REAP770": "all-vram",
        "llamacpp unsloth/Kimi-K3-GGUF:UD-Q4_K_XL": "hybrid",
        "llamacpp unsloth/Kimi-K3-GGUF:UD-IQ1_M": "all-vram",
        "llamacpp unsloth/Kimi-K3-GGUF:UD-IQ1_S": "all-vram",
    }
    by_model = {(r["engine"], r["model"]): r for r in document["routes"]}
    iq2 = by_model[("llamacpp", "unsloth/Kimi-K3-GGUF:UD-IQ2_XXS")]
    assert iq2["speed"].startswith("13.9 tok/s c1, ~25 tok/s aggregate c4-c8")  # seed 000 step 2
    assert "seed 000 step 2 on 8x RTX PRO 6000" in iq2["speed"]
    assert by_model[("llamacpp", "unsloth/Kimi-K3-GGUF:UD-IQ1_M")]["speed"] is None  # nobody measured it
    vllm = by_model[("vllm", "moonshotai/Kimi-K3")]
    # Issue 37: the first reason is the one no profile field changes (the checkpoint is larger than the VRAM);
    # "not a listed kind" alone read as if vllm.any_gpu would make it run.
    assert vllm["why"].startswith("the checkpoint's weights (1385 GiB of safetensors at lower bound) do not fit")
    assert "are NVIDIA RTX PRO 6000 Blackwell Server Edition, not B300 or GB300" in vllm["why"]
    assert "refused" in by_model[("llamacpp", "unsloth/Kimi-K3-GGUF:UD-TQ2_0")]["why"]
    assert "wrapper over the same GGUF path" in by_model[("ollama", "hf.co/unsloth/Kimi-K3-GGUF:<quant>")]["why"]


def test_b300_host_takes_the_native_checkpoint(tmp_path: Path) -> None:
    code, out, _ = run(["--json", "--host-facts", str(B300_HOST)], tmp_path)
    assert code == 0
    routes_here = feasible(json.loads(out))
    assert routes_here["vllm moonshotai/Kimi-K3"] == "tp8"
    assert routes_here["sglang moonshotai/Kimi-K3"] == "tp8-dcp8"
    assert routes_here["llamacpp unsloth/Kimi-K3-GGUF:UD-Q4_K_XL"] == "all-vram"  # 1.51 TB < 2144 GiB of HBM


def test_b300_below_the_driver_floor_refuses_vllm_only(tmp_path: Path) -> None:
    data = yaml.safe_load(B300_HOST.read_text()) | {"driver": "575.57.08"}  # seed 001: R575/CUDA 12.9 stack
    report = routes(described_host(data, "b300-575.yaml"))
    by_engine = {r.engine: r for r in report.routes if r.engine != "llamacpp"}
    assert not by_engine["vllm"].feasible and "NVIDIA driver 575.57.08 is older than 580" in by_engine["vllm"].why
    # llama.cpp's default base images are CUDA 13.0 too: NVIDIA's table says 580.65.06.
    assert not any(r.feasible for r in report.routes if r.engine == "llamacpp")
    assert "older than 580.65.06" in report.routes[0].why


def test_gb300_is_vllm_not_sglang() -> None:
    """Seed 001: vLLM lists GB300; the SGLang cookbook's 8x B300 profile must not be copied to GB200/GB300."""
    data = {"gpus": [{"name": "NVIDIA GB300", "count": 8, "memory_gib": 268}], "ram_gib": 1024, "driver": "580.95.05"}
    by_engine = {r.engine: r for r in routes(described_host(data, "gb300.yaml")).routes}
    assert by_engine["vllm"].feasible
    assert not by_engine["sglang"].feasible and "are NVIDIA GB300, not B300" in by_engine["sglang"].why


def test_eight_h200_hold_no_native_checkpoint() -> None:
    """The recorded H200, as 8: not a listed kind, and 8x 140 GiB is below the checkpoint's lower bound anyway."""
    host = h200_host(gpus=8, ram_total=1 << 40)
    assert sum(g.memory_total for g in host.gpus) < NATIVE_MIN_BYTES
    report = routes(host)
    assert not any(r.feasible for r in report.routes if r.engine in ("vllm", "sglang"))
    assert {r.model.rpartition(":")[2]: r.placement for r in report.feasible}["UD-Q2_K_XL"] == "all-vram"


def test_this_machine_is_demo_only(tmp_path: Path) -> None:
    """This dev machine has no GPU and tens of GiB of RAM: no route of Kimi-K3, the demo profile's route is its own."""
    code, out, _ = run(["--json", str(PROFILES / "demo-cpu.yaml")], tmp_path)
    assert code == 0
    document = json.loads(out)
    assert document["host"]["source"] == "observed"
    if document["host"]["gpus"] or (document["host"]["ram_bytes"] or 0) > 600 << 30:
        pytest.skip("this host has GPUs or the RAM of a real one: the demo-only case is for the dev machine")
    assert not [r for r in document["routes"] if r["feasible"]]
    assert [r["model"] for r in document["routes"] if r["profile"]] == ["kimik3-demo/Kimi-K3-tiny-GGUF:UD-Q2_K_XL"]
    assert any("no route serves Kimi-K3 here" in note for note in document["notes"])


def test_text_marks_the_profiles_route(tmp_path: Path) -> None:
    code, out, _ = run(["--host-facts", str(SEED_HOST), str(PROFILES / "allvram-iq2xxs.yaml")], tmp_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"host ({SEED_HOST}): 8x NVIDIA RTX PRO 6000 Blackwell Server Edition (95.6 GiB)")
    assert [line for line in lines if "(this profile)" in line] == [
        next(line for line in lines if line.startswith("yes llamacpp unsloth/Kimi-K3-GGUF:UD-IQ2_XXS all-vram"))
    ]


@pytest.mark.parametrize(
    "data, field",
    [
        ({"gpus": [{"name": "B300", "count": 8}], "ram_gib": 1}, "gpus[0].memory_gib: required"),
        ({"gpus": [{"name": "B300", "count": True, "memory_gib": 1}], "ram_gib": 1}, "gpus[0].count: must be"),
        ({"gpus": [{"name": "B300", "count": 8, "memory_gb": 1}], "ram_gib": 1}, "gpus[0].memory_gb: not a field"),
        ({"gpus": [{"count": 8, "memory_gib": 1}], "ram_gib": 1}, "gpus[0].name: required"),
        ({"ram_gib": -1}, "ram_gib: must be a positive number"),
        ({"ram_gib": 1, "driver": 580.95}, "driver: must be a version"),
        ({"ram_gib": 1, "ram_bytes": 1}, "ram_gib and ram_bytes: give one of them"),
        (
            {"gpus": [{"name": "B300", "memory_gib": 1, "compute_capability": "10.3"}], "ram_gib": 1},
            "gpus[0].compute_capability: must be [major, minor]",
        ),
        ([1, 2], "a described host is a mapping"),
    ],
)
def test_described_host_refusals_name_the_field(data: object, field: str) -> None:
    with pytest.raises(InputError, match=r"^host\.yaml: " + field.replace("[", r"\[").replace("]", r"\]")):
        described_host(data, "host.yaml")


def test_bad_host_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "host.yaml"
    bad.write_text("gpus: [{name: NVIDIA B300, count: 8}]\nram_gib: 2048\n")
    code, out, err = run(["--json", "--host-facts", str(bad)], tmp_path)
    assert code == 2
    assert "gpus[0].memory_gib: required" in err
    assert json.loads(out)["error"]["message"].endswith("gpus[0].memory_gib: required (or gpus[0].memory_bytes)")


def test_no_driver_counts_no_gpu() -> None:
    """GPUs NVML cannot reach (no driver) hold nothing: every GPU route is judged as a CPU host's."""
    host = HostFacts(ram_total=64 << 30, gpu_probe="no-driver", gpus=h200_host(gpus=8).gpus)
    assert {r.placement for r in routes(host).routes if r.engine == "llamacpp" and "refused" not in r.why} == {"cpu"}
