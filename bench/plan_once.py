"""Benchmark: how often one `plan()` derives what the engine's plan holds (issue 37 item 1), and what it costs,
for this checkout and, with --baseline, another one (each run in its own process, its own code on the path).

    .venv/bin/python bench/plan_once.py [--baseline /path/to/other/checkout] [--runs 200]

Counted in one plan of each shipped recipe on a host it fits (planning only: the observation is built as the
planner tests build it, tests/support/observed.py): calls of derive_mode, entries into planning/vram_fit.py from
outside it (wherever it lives: engines/llamacpp/ after issue 37 item 2), derivations of the mode (calls that
computed it, not answered by the last one), runs of the host gate (the plan's and one per other route), renders
of a llama.cpp image build. Then the median and spread of `runs` plans (in-process, after one warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path("tests").resolve()))
from support.observed import model_fact, observed
from support.recorded_hosts import seed000_host
from support.shipped import pinned_text
from kimik3_reconciler.model.described_host import described_host
from kimik3_reconciler.model.facts import PulledImageFact, RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning import plan
import yaml

GIB = 1 << 30

def case(name):
    profile = parse_profile(pinned_text(Path("profiles") / name), name).profile.model_copy(update={"systemd": None})
    if profile.engine == "llamacpp":
        quant = profile.model.quant
        files = tuple(RemoteFile(path=f"{quant}/K-{quant}-0000{i}-of-00004.gguf", size=200 * GIB, sha256=str(i) * 64)
                      for i in range(1, 5))
        return profile, observed(profile, host=seed000_host(8), model=model_fact(profile, files=files))
    b300 = yaml.safe_load(Path("tests/fixtures/host/described-b300.yaml").read_text())
    facts = described_host(b300, "b300")
    facts = facts.model_copy(update={"physical_cores": 96, "numa_balancing": 0, "docker_gpus": True})
    files = tuple(RemoteFile(path=f"model-{i:05d}-of-00004.safetensors", size=400 * GIB, sha256=str(i) * 64)
                  for i in range(1, 5))
    ref = profile.image.ref
    return profile, observed(profile, host=facts, model=model_fact(profile, quant="checkpoint", files=files),
                             pulled=PulledImageFact(ref=ref, digest=ref.split("@")[1], pull_bytes=20 * GIB))

def counted(profile, facts):
    counts = {"derive_mode calls": 0, "mode derivations": 0, "vram_fit entries": 0, "host_gate": 0,
              "render_image_build": 0}
    memo = any(hasattr(m, "_derive_mode") for m in list(sys.modules.values()) if hasattr(m, "derive_mode"))
    def hook(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        name = code.co_name
        if name == "derive_mode":
            counts["derive_mode calls"] += 1
        if name == ("_derive_mode" if memo else "derive_mode"):
            counts["mode derivations"] += 1
        if name == "host_gate" and code.co_filename.endswith("host_gate.py"):
            counts["host_gate"] += 1
        if name == "render_image_build":
            counts["render_image_build"] += 1
        if code.co_filename.endswith("vram_fit.py") and not frame.f_back.f_code.co_filename.endswith("vram_fit.py"):
            counts["vram_fit entries"] += 1
    sys.setprofile(hook)
    try:
        plan(profile, facts)
    finally:
        sys.setprofile(None)
    return counts

result = {}
for name in ("hybrid-q2.yaml", "vllm-tp8.yaml"):
    profile, facts = case(name)
    plan(profile, facts)  # warm: imports, caches
    counts = counted(profile, facts)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        plan(profile, facts)
        times.append(time.perf_counter() - start)
    times.sort()
    counts["ms median"] = round(statistics.median(times) * 1000, 3)
    counts["ms p10-p90"] = [round(times[len(times) // 10] * 1000, 3), round(times[len(times) * 9 // 10] * 1000, 3)]
    result[name] = counts
print(json.dumps(result))
"""


def measure(root: Path, runs: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD.replace("RUNS", str(runs))], cwd=root, env=env, capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(f"{root}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    roots = {"this": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    found = {label: measure(root, args.runs) for label, root in roots.items()}
    for profile in found["this"]:
        print(profile)
        for key in found["this"][profile]:
            row = "  ".join(f"{label} {found[label][profile][key]}" for label in found)
            print(f"  {key:<20} {row}")
    if args.baseline:
        for profile in found["this"]:
            ratio = found["this"][profile]["ms median"] / found["baseline"][profile]["ms median"]
            print(f"{profile}: plan() time this/baseline = {ratio:.2f} (medians of {args.runs})")


if __name__ == "__main__":
    main()
