"""Issue 27 item 1 against the real llama-server (b11434, the demo's CPU image): with serve.ctx_size left out,
the plan says what each request gets, and the server gives each of its slots exactly that. The demo's tiny model
was trained on 4096 tokens (its GGUF header), so the default's 131,072 a request is capped there: -c 8192 over
2 slots, 4096 a slot, as /slots reports it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.demo_work import fresh_work
from support.realparts import demo_profile, destroyed_after, kimik3, write_profile

from kimik3_demo.hub import FixtureHub

pytestmark = pytest.mark.docker

NAME, PORT = "k3ctx-facts27a", 19231


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = fresh_work(tmp_path_factory, "kimik3-context", NAME)
    profile = demo_profile(work, NAME, PORT, hub.url)
    del profile["serve"]["ctx_size"]  # the default: 131,072 a request, capped at the trained context
    profile["serve"]["parallel"] = 2
    write_profile(work, profile)
    with destroyed_after(work, NAME):
        yield work


def test_the_plan_says_what_each_request_gets_and_the_server_gives_each_slot_that(work: Path) -> None:
    plan = json.loads(kimik3(work, "plan", "profile.yaml", "--json").stdout)
    (container,) = [s for s in plan["steps"] if s["kind"] == "container"]
    assert (
        "each request gets 4,096 tokens (the default: seed 001's 131,072 a request, capped at the trained "
        "4,096, x 2 slots = -c 8,192); KV cache"
    ) in container["reason"]
    command = container["spec"]["command"]  # the rendered container (LaunchContainer.to_json)
    assert command[command.index("--ctx-size") + 1] == "8192" and command[command.index("--parallel") + 1] == "2"
    kimik3(work, "apply", "profile.yaml", "--no-verify-server")
    slots = httpx.get(f"http://127.0.0.1:{PORT}/slots", timeout=10).json()
    assert [s["n_ctx"] for s in slots] == [4096, 4096]
    assert kimik3(work, "plan", "profile.yaml", "--detailed-exitcode", check=False).returncode == 0  # converged
