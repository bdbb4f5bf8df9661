"""engine: sglang (issue 25 §3): profiles/sglang-tp8.yaml renders seed 001's `sglang serve` command flag for flag
(tests/golden/sglang-tp8.json: the model is the mounted, verified checkpoint, not a repo the container
downloads), and every rendered argv is accepted by SGLang's own argument parser from its PyPI package.

No SGLang server runs here (its wheel needs CUDA; TESTING.md §10): the parser test imports sglang 0.5.23 from
/work/venv-sglang (or $KIMIK3_SGLANG_PYTHON) in a subprocess and skips, saying why, where that venv is absent."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest
from support.observed import observed
from support.shipped import pinned_text

from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.launch import render_launch

ROOT = Path(__file__).resolve().parents[3]
PROFILE = ROOT / "profiles" / "sglang-tp8.yaml"
GOLDEN = ROOT / "tests" / "golden" / "sglang-tp8.json"
HOST = HostFacts(physical_cores=16, cpu_flags=("avx512f",))
SGLANG_PYTHON = Path(os.environ.get("KIMIK3_SGLANG_PYTHON", "/work/venv-sglang/bin/python"))

# Seed 001, "Hvordan deploye Kimi K3 med SGLang": the verified B300 TP8/DCP8 profile, as printed there (the ratio's
# placeholder is the profile's value).
SEED_001 = """sglang serve \\
  --trust-remote-code \\
  --model-path moonshotai/Kimi-K3 \\
  --tp-size 8 \\
  --dcp-size 8 \\
  --mem-fraction-static 0.85 \\
  --mamba-full-memory-ratio <value-from-official-calculator> \\
  --reasoning-parser kimi_k3 \\
  --tool-call-parser kimi_k3 \\
  --host 0.0.0.0 \\
  --port 30000"""
# What kimik3 adds to the seed's command, each for a reason (engines/sglang/launch.py).
KIMIK3_ADDS = {"--served-model-name": "kimi-k3", "--enable-metrics": None}


def launch_of(profile_text: str):
    """(profile, the planner's launch) on a GPU-less described host: planning/launch.render_launch, as a plan renders it
    (the image by its digest, the checkpoint folder mounted read-only, the engine's argv and env)."""
    profile = parse_profile(profile_text, "sglang.yaml").profile
    return profile, render_launch(profile, observed(profile, host=HOST), profile.image.ref, profile.image.digest)


def render(profile_text: str) -> tuple[str, ...]:
    return launch_of(profile_text)[1].spec.command


def pairs(argv: list[str]) -> dict[str, str | None]:
    """{flag: value or None for a switch} of an argv of `--flag [value]` words."""
    out: dict[str, str | None] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[word] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_golden_render_is_seed_001s_command() -> None:
    profile, launch = launch_of(pinned_text(PROFILE))
    spec = asdict(launch.spec)
    spec["labels"] = sorted(k for k, _ in launch.spec.labels)  # values hold fingerprints: names suffice
    got = (
        json.dumps(
            {"container": spec, "health_url": launch.health_url, "warnings": list(launch.warnings)},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    if os.environ.get("KIMIK3_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    assert GOLDEN.read_text() == got
    argv = list(launch.spec.command)
    seed = shlex.split(SEED_001.replace("\\\n", " "))
    assert argv[:2] == seed[:2] == ["sglang", "serve"]
    ours, theirs = pairs(argv[2:]), pairs(seed[2:])
    theirs["--mamba-full-memory-ratio"] = str(profile.sglang.mamba_full_memory_ratio)
    # The model is the mounted, verified snapshot at the pinned revision (read-only), not the Hub repo id.
    assert ours.pop("--model-path") == f"/models/models--moonshotai--Kimi-K3/snapshots/{profile.model.revision}"
    theirs.pop("--model-path")
    assert {k: ours.pop(k) for k in KIMIK3_ADDS} == KIMIK3_ADDS
    assert ours == theirs  # every other flag and value is the seed's, none missing, none added
    # The image runs by its digest; the container gets no token and fetches nothing; the checkpoint is read-only.
    assert launch.spec.image == profile.image.ref
    assert dict(launch.spec.env) == {"HF_HUB_OFFLINE": "1"}
    assert all(m.read_only for m in launch.spec.mounts)
    assert launch.health_url.endswith(":30000/health")


def test_a_knob_moves_its_flag_and_the_fingerprint() -> None:
    text = pinned_text(PROFILE)
    _, before = launch_of(text)
    _, after = launch_of(text.replace("mamba_full_memory_ratio: 0.9", "mamba_full_memory_ratio: 0.5"))
    assert pairs(list(after.spec.command))["--mamba-full-memory-ratio"] == "0.5"
    assert after.fingerprint != before.fingerprint
    assert after.inputs["sglang.mamba_full_memory_ratio"] == 0.5  # the label names the field that moved


def _variants() -> list[tuple[str, str]]:
    """The shipped profile and knob variants: every field of the `sglang:` section and the serve fields it renders."""
    text = pinned_text(PROFILE)
    return [
        ("shipped", text),
        (
            "null parsers, other sizes",
            text.replace("tp_size: 8", "tp_size: 4")
            .replace("dcp_size: 8", "dcp_size: 2")
            .replace("reasoning_parser: kimi_k3", "reasoning_parser: null")
            .replace("tool_call_parser: kimi_k3", "tool_call_parser: null"),
        ),
        (
            "loopback, extra args",
            text.replace("host: 0.0.0.0 ", "host: loopback ").replace(
                "port: 30000 ", 'port: 30001\n  extra_args: [--context-length, "131072", --enable-torch-compile] '
            ),
        ),
    ]


@pytest.mark.engines
@pytest.mark.skipif(
    not SGLANG_PYTHON.exists(),
    reason=f"no SGLang venv at {SGLANG_PYTHON} (TESTING.md §10: pip "
    "install --no-deps sglang==0.5.23 + its import deps; or set KIMIK3_SGLANG_PYTHON)",
)
@pytest.mark.parametrize("name, text", _variants(), ids=[n for n, _ in _variants()])
def test_sglangs_own_parser_accepts_the_rendered_argv(name: str, text: str) -> None:
    argv = list(render(text))
    assert argv[:2] == ["sglang", "serve"]
    # What `sglang serve` does with the rest for a language model (sglang/cli/serve.py _run_llm ->
    # srt/server_args.prepare_server_args): an argparse parser of ServerArgs' own arguments. Parsed in SGLang's venv.
    script = (
        "import argparse, json, sys\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "parser = argparse.ArgumentParser(prog='sglang serve')\n"
        "ServerArgs.add_cli_args(parser)\n"
        "args = parser.parse_args(json.loads(sys.argv[1]))\n"
        "print(json.dumps({k: getattr(args, k) for k in ('model_path', 'tp_size', 'dcp_size', 'mem_fraction_static',"
        " 'mamba_full_memory_ratio', 'reasoning_parser', 'tool_call_parser', 'host', 'port', 'served_model_name',"
        " 'trust_remote_code', 'enable_metrics')}))\n"
    )
    done = subprocess.run(
        [str(SGLANG_PYTHON), "-c", script, json.dumps(argv[2:])],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    profile = parse_profile(text, "p").profile
    knobs = profile.sglang
    assert (parsed["tp_size"], parsed["dcp_size"]) == (knobs.tp_size, knobs.dcp_size)
    assert parsed["mem_fraction_static"] == knobs.mem_fraction_static
    assert parsed["mamba_full_memory_ratio"] == knobs.mamba_full_memory_ratio
    assert (parsed["reasoning_parser"], parsed["tool_call_parser"]) == (knobs.reasoning_parser, knobs.tool_call_parser)
    assert parsed["port"] == profile.serve.port and parsed["served_model_name"] == profile.name
    assert parsed["trust_remote_code"] is True and parsed["enable_metrics"] is True
    assert parsed["model_path"].endswith(f"/snapshots/{profile.model.revision}")


@pytest.mark.engines
@pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason=f"no SGLang venv at {SGLANG_PYTHON}")
def test_sglangs_parser_refuses_what_kimik3_refuses_first() -> None:
    """The placeholder seed 001 prints fails in SGLang's parser too (after a multi-terabyte download, at launch):
    kimik3's schema refuses it when the profile is loaded (cases/profile/sglang_ratio_placeholder.yaml)."""
    script = (
        "import argparse, sys\nfrom sglang.srt.server_args import ServerArgs\n"
        "p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)\n"
        "p.parse_args(['--model-path', '/m', '--mamba-full-memory-ratio', '<value-from-official-calculator>'])\n"
    )
    done = subprocess.run([str(SGLANG_PYTHON), "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "mamba-full-memory-ratio" in done.stderr
