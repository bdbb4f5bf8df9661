"""Three (or N) llama-server replicas on loopback: containers of the demo's llama.cpp image (build b11434, the one
kimik3 builds), `--network host`, kimik3's fixed flags, serving the tiny kimi-k3 GGUF (random weights; its
vocabulary is bytes, so about one token per character). For the router tests and bench/fleet_cache.py: routing and
prefix caching are the same as on the fleet rig's namespace hosts (tests/support/fleet_hosts.py), without its image
push, three dockerds and a kimik3 install per host. Containers are named `{prefix}-{i}` and removed by those names."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

from kimik3_reconciler.engines import engine_for
from support.ports import free_port

DEMO_IMAGE = "kimi-k3-llamacpp:mainline-ad1de39-cpu"  # the demo's image (bench/load.py's): build b11434
MODEL_NAME = "k3"


class Replicas:
    """`count` llama-server containers on loopback ports serving the GGUF in `model_dir`; `start()` (re)starts them
    fresh (empty caches), `close()` removes them. Containers are named `{prefix}-{i}` and removed by that name."""

    def __init__(
        self,
        model: Path,
        count: int = 3,
        image: str = DEMO_IMAGE,
        prefix: str = "k3fc",
        parallel: int = 2,
        ctx_size: int = 16384,
        threads: int = 1,
        cache_ram: int | None = None,
    ) -> None:
        self.model, self.count, self.image, self.parallel = model, count, image, parallel
        self.ctx_size, self.threads = ctx_size, threads
        self.cache_ram = cache_ram  # MiB of host prompt cache (--cache-ram); None: llama-server's default, 8192
        self.names = [f"{prefix}-{i}" for i in range(1, count + 1)]
        self.ports = [free_port() for _ in range(count)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]

    def argv(self, name: str, port: int) -> list[str]:
        mount = f"{self.model.parent}:/models:ro"
        container = ["docker", "run", "-d", "--name", name, "--network", "host", "-v", mount]
        server = ["-m", f"/models/{self.model.name}", "--host", "127.0.0.1", "--port", str(port), "--alias", MODEL_NAME]
        sizes = ["--ctx-size", str(self.ctx_size), "--parallel", str(self.parallel)]
        if self.cache_ram is not None:
            sizes += ["--cache-ram", str(self.cache_ram)]
        # kimik3's fixed flags (engines/llamacpp/launch.py); verbosity 4: the prompt cache's "limits" lines
        fixed = engine_for("llamacpp").owned_flags(self.threads, "none")
        return [*container, self.image, *server, *fixed, *sizes, "--metrics", "--log-verbosity", "4"]

    def start(self) -> None:
        """Every replica (re)started fresh: empty caches, counters at 0."""
        self.close()
        for name, port in zip(self.names, self.ports):
            subprocess.run(self.argv(name, port), check=True, capture_output=True)
        for url in self.urls:
            self._wait_healthy(url)

    def restart(self, index: int) -> None:
        """Replica `index` (0-based) replaced by a fresh one on the same port: a host that rejoins after an update."""
        subprocess.run(["docker", "rm", "-f", self.names[index]], capture_output=True)
        subprocess.run(self.argv(self.names[index], self.ports[index]), check=True, capture_output=True)
        self._wait_healthy(self.urls[index])

    @staticmethod
    def _wait_healthy(url: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer /health 200 in {timeout_s:.0f} s")
            time.sleep(0.2)

    def limits(self) -> str:
        """The first replica's prompt-cache limits line (`cache state: … (limits: … MiB, … tokens …)`), once a
        prompt was cached; '' before."""
        log = subprocess.run(["docker", "logs", self.names[0]], capture_output=True, text=True).stderr
        lines = [line.split("update:", 1)[1].strip() for line in log.splitlines() if "limits:" in line]
        return lines[-1] if lines else ""

    def held_prompts(self) -> list[list[int]]:
        """Per replica, the prompts its host prompt cache held after each update since it started (its log's
        `cache state: N prompts` lines, in order); the conversations in its slots are not counted there."""
        out = []
        for name in self.names:
            log = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
            out.append(
                [
                    int(line.split("cache state:", 1)[1].split()[0])
                    for line in log.splitlines()
                    if "cache state:" in line
                ]
            )
        return out

    def close(self) -> None:
        subprocess.run(["docker", "rm", "-f", *self.names], capture_output=True)

    def __enter__(self) -> Replicas:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_model(folder: Path) -> Path:
    """The tiny kimi-k3 GGUF (random weights), one file, its context long enough for the trace's conversations."""
    from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3

    return write_tiny_kimi_k3(folder, "Kimi-K3-tiny", shards=1, dims=TinyDims(context_length=32768))[0]
