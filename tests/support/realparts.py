"""Shared by the integration tests: the real `kimik3` command, the docker CLI, and a demo-shaped
profile (tiny model behind the fixture hub, the demo's CPU image build) under its own name/port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from kimik3_demo.prepare import ensure_source_archive, prepare_hub_root

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_DIR = REPO_ROOT / ".kimik3-demo"
KIMIK3 = [sys.executable, "-m", "kimik3_reconciler"]


def serves(port: int) -> bool:
    """llama-server on 127.0.0.1:`port` answers /health 200 (refused while it starts, 503 while it loads)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def wait_for(what: str, check: Callable[[], bool], timeout: float = 90, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout.strip()


def docker_ports(state: object, clock: object):  # noqa: ANN201 - kimik3's Ports
    """Ports with the real Docker adapter alone (no hub, HTTP or host): for a test of one Docker step."""
    from kimik3_reconciler.adapters.docker_engine import DockerEngine
    from kimik3_reconciler.ports import Ports

    return Ports(docker=DockerEngine(), hub=None, http=None, host=None, state=state, clock=clock)  # type: ignore[arg-type]


def require_docker_and_demo_hub() -> Path:
    """Fail (never skip) without a daemon: CI starts one. Returns the prepared hub root."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker daemon answers: run scripts/ensure-docker.sh (CI does)")
    prepare_hub_root(DEMO_DIR / "hub")
    return DEMO_DIR / "hub"


def demo_profile(work: Path, name: str, port: int, hub_url: str) -> dict:
    """The demo profile, renamed and re-ported; its build section is the demo's (the cached image)."""
    archive = DEMO_DIR / "llama.cpp-b11434.tar.gz"
    ensure_source_archive(DEMO_DIR / "cache", archive)
    profile = yaml.safe_load((REPO_ROOT / "profiles" / "demo-cpu.yaml").read_text())
    profile["name"] = name
    profile["model"].update(endpoint=hub_url, cache_dir=str(work / "hf-cache"))
    profile["build"]["archive"] = str(archive)
    profile["serve"]["port"] = port
    return profile


def chat_turn(url: str, model: str, messages: list[dict], max_tokens: int = 4, api_key: str | None = None) -> dict:
    """One non-streamed chat request to the server at `url` (with `api_key` as a Bearer token), raised on a non-200;
    its JSON (llama-server's carries `timings`: cache_n, prompt_n)."""
    import httpx

    answer = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0},
        headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
        timeout=300,
    )
    answer.raise_for_status()
    return answer.json()


def write_profile(work: Path, profile: dict, name: str = "profile.yaml") -> Path:
    path = work / name
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def kimik3(work: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real CLI with its own state dir and HF home under `work`."""
    env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "state"), "HF_HOME": str(work / "hf-home")}
    result = subprocess.run([*KIMIK3, *args], capture_output=True, text=True, env=env, cwd=work, timeout=3600)
    if check and result.returncode != 0:
        raise AssertionError(f"kimik3 {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def demo_hub():  # noqa: ANN201 - a kimik3_demo FixtureHub
    """The fixture hub serving the demo repo (a context manager: `with demo_hub() as hub:`)."""
    from kimik3_demo.hub import FixtureHub
    from kimik3_demo.prepare import demo_repos

    return FixtureHub(demo_repos(require_docker_and_demo_hub()))


def remove_leftovers(*names: str) -> None:
    """The containers of these names (the calling test's own, never another's) that an earlier run left when it was
    killed before its teardown: removed before a fixture converges from nothing, so its first plan creates rather
    than replaces (CI's fresh machine had one left)."""
    subprocess.run(["docker", "rm", "-f", *names], capture_output=True)


def converged_demo(work: Path, name: str, port: int) -> Iterator[Path]:
    """A module fixture's body: the demo profile as `name` on `port`, applied from `work`; removed after."""
    remove_leftovers(name)
    with demo_hub() as hub:
        write_profile(work, demo_profile(work, name, port, hub.url))
        kimik3(work, "apply", "profile.yaml")
        yield work
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)


@contextmanager
def destroyed_after(work: Path, container: str) -> Iterator[Path]:
    """`work`; after, whatever happened, `kimik3 destroy profile.yaml` there and the container removed (a destroy
    that failed leaves none behind for the next run)."""
    try:
        yield work
    finally:
        kimik3(work, "destroy", "profile.yaml", check=False)
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)


@contextmanager
def applied(work: Path, container: str, *apply_args: str) -> Iterator[Path]:
    """`kimik3 apply profile.yaml` in `work` (with `apply_args`), destroyed after (`destroyed_after`). A container
    of that name left by an earlier run killed before its teardown is removed first: the apply converges from
    nothing."""
    remove_leftovers(container)
    with destroyed_after(work, container):
        kimik3(work, "apply", "profile.yaml", *apply_args)
        yield work
