"""A no-op `plan` loads only what it uses (bench/plan.py, docs/design.md "What a no-op plan imports").

The packages below cost milliseconds to tens of milliseconds each to import on a 2-core machine and a
converged plan needs none of them: the docker SDK (reads go over the socket), httpx and huggingface_hub's
API (no hub request), openai (verify only), structlog (nothing is logged), numpy/gguf (the smoke model),
pydantic and yaml (a profile validated before comes from the profile cache as plain values; saved plans
only), the executors (steps/: imported when a step runs), rich (a plan printed to a pipe or file is written plainly: kimik3_reconciler/console.py), pynvml
where there is no NVML library, asyncio (bench only), the bench and tune commands (click
loads them lazily), zipfile (importlib.resources), tenacity (loaded at the first transient error),
http.client/email/ssl (adapters/http_wire.py sends the plan's GETs). A fresh interpreter walks the plan's code path short of
dockerd: the CLI, the profile from a warm cache, the real ports, the logging setup, the read transport, a
/health probe, the NVML probe, the planners and the rendering. An assertion about what is imported, not a
timing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOT_LOADED_BY_A_NOOP_PLAN = (
    "docker",
    "requests",
    "urllib3",
    "httpx",
    "httpcore",
    "openai",
    "structlog",
    "numpy",
    "gguf",
    "huggingface_hub.hf_api",
    "huggingface_hub.file_download",
    "rich.progress",
    "tarfile",
    "pydantic",
    "pydantic_core",
    "yaml",
    "asyncio",
    "zipfile",
    "rich",
    "tenacity",
    "http.client",
    "email",
    "ssl",
    "kimik3_reconciler.cli.bench_cmd",
    "kimik3_reconciler.cli.tune_cmd",
    "kimik3_reconciler.model.profile_schema",
    "kimik3_reconciler.model.profile_source",
    # the profile rules run when a profile is validated; a cached one is not (model/profile_rules/__init__.py)
    *(
        f"kimik3_reconciler.model.profile_rules.{concern}"
        for concern in (
            "order",
            "quants",
            "serving",
            "server_args",
            "no_secrets",
            "paths",
            "build",
            "listeners",
            "workers",
        )
    ),
)
NO_NVML_LIBRARY = ("pynvml",)  # where the library is absent (a CPU host, CI): the ctypes pre-check answers

PLAN_PATH = """
import sys, tempfile
from pathlib import Path

import kimik3_reconciler.cli
from kimik3_reconciler.adapters import real_ports
from kimik3_reconciler.cli.inputs import load
from kimik3_reconciler.planning import plan
from kimik3_reconciler.render import render_plan
from kimik3_reconciler.reporting import CliReporter, configure_logging
from support.observed import observed

profile_path = sys.argv[2]
loaded = load(profile_path, cached=True)                          # a cache hit: the first process filled it

configure_logging(json_logs=True, verbose=False)                  # what cli's orchestrator() does
reporter = CliReporter(kimik3_reconciler.cli._err, False, False)
ports = real_ports(Path(tempfile.mkdtemp()), "unix:///nonexistent/docker.sock")
ports.docker.reads                                                # the read transport observation uses
ports.http.health("http://127.0.0.1:1/health")                    # the container's /health (refused here)
ports.host.nvml()                                                 # the GPU probe (no driver here: a fact)
ports.hub.cached_file("org/m", "ab" * 20, "Q/m.gguf", tempfile.mkdtemp())  # the model collector's cache check
render_plan(plan(loaded.profile, observed(loaded.profile)), kimik3_reconciler.cli._err, verbose=True)
print("\\n".join(sorted(sys.modules)))
"""


def test_the_noop_plan_path_does_not_import_the_heavy_sdks(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    env = {
        "PYTHONPATH": f"{root}:{root / 'tests'}",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "KIMIK3_CACHE_DIR": str(tmp_path / "cache"),
    }
    profile, state_dir = str(root / "profiles" / "demo-cpu.yaml"), str(tmp_path / "state")
    warm = "import sys; from kimik3_reconciler.cli.inputs import load; load(sys.argv[1], cached=True)"
    subprocess.run([sys.executable, "-c", warm, profile, state_dir], cwd=root, env=env, check=True)  # validates
    result = subprocess.run(
        [sys.executable, "-c", PLAN_PATH, state_dir, profile],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        check=True,
    )
    loaded = set(result.stdout.split())
    assert {
        "kimik3_reconciler.cli",
        "kimik3_reconciler.adapters.docker_engine",
        "kimik3_reconciler.render",
        "kimik3_reconciler.adapters.docker_socket",
        "kimik3_reconciler.adapters.http",
    } <= loaded  # it ran
    heavy_names = NOT_LOADED_BY_A_NOOP_PLAN + (NO_NVML_LIBRARY if not _nvml_library() else ())
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in heavy_names))
    assert heavy == [], f"a no-op plan now imports {heavy}: import them where they are used (see this module)"
    executors = sorted(m for m in loaded if m.startswith("kimik3_reconciler.steps."))
    assert executors == ["kimik3_reconciler.steps.report"], f"executors imported by a plan: {executors}"


def _nvml_library() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True
