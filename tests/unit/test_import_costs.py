"""A no-op `plan` loads only what it uses (bench/plan.py, docs/design.md "Observation costs").

The SDKs below cost tens of milliseconds each to import on a 2-core machine and a converged plan
needs none of them: the docker SDK (reads go over the socket), httpx and huggingface_hub's API (no hub
request), openai (verify only), structlog (nothing is logged), numpy/gguf (the smoke model). A fresh
interpreter walks the plan's code path short of dockerd: the CLI, the real ports, the logging setup,
the read transport, a /health probe, the NVML probe. An assertion about what is imported, not a timing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOT_LOADED_BY_A_NOOP_PLAN = (
    "docker", "requests", "urllib3", "httpx", "httpcore", "openai", "structlog", "numpy", "gguf",
    "huggingface_hub.hf_api", "huggingface_hub.file_download", "rich.progress", "tarfile",
)

PLAN_PATH = """
import sys, tempfile
from pathlib import Path

import kimik3_reconciler.cli
from kimik3_reconciler.adapters import real_ports
from kimik3_reconciler.reporting import CliReporter, configure_logging

configure_logging(json_logs=True, verbose=False)                  # what cli's engine() does
reporter = CliReporter(kimik3_reconciler.cli._err, False, False)
ports = real_ports(Path(tempfile.mkdtemp()), "unix:///nonexistent/docker.sock")
ports.docker.reads                                                # the read transport observation uses
ports.http.health("http://127.0.0.1:1/health")                    # the container's /health (refused here)
ports.host.nvml()                                                 # the GPU probe (no driver here: a fact)
ports.hub.cached_file("org/m", "ab" * 20, "Q/m.gguf", tempfile.mkdtemp())  # the model collector's cache check
print("\\n".join(sorted(sys.modules)))
"""


def test_the_noop_plan_path_does_not_import_the_heavy_sdks() -> None:
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", PLAN_PATH], capture_output=True, text=True, cwd=root,
                            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(root)}, check=True)
    loaded = set(result.stdout.split())
    assert {"kimik3_reconciler.cli", "kimik3_reconciler.adapters.docker_engine",
            "kimik3_reconciler.adapters.docker_socket", "kimik3_reconciler.adapters.http"} <= loaded  # it ran
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in NOT_LOADED_BY_A_NOOP_PLAN))
    assert heavy == [], f"a no-op plan now imports {heavy}: import them where they are used (see this module)"
