"""`kimik3 verify` and the openai chat adapter against a real llama-server container.

Same preparation as test_reconcile_docker.py (demo hub fixture, demo-cpu profile, the cached CPU
image), under its own container name and port so both modules can run at once. The profile sets
an API key, so every request below also proves the key is sent, and never printed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realparts import demo_hub, demo_profile, docker, kimik3, write_profile

from kimik3_demo.hub import FixtureHub
from kimik3_reconciler.adapters.http import HttpClient
from kimik3_reconciler.adapters.openai_chat import OpenAIChat
from kimik3_reconciler.errors import PermanentError, TransientError

pytestmark = pytest.mark.docker

NAME = "kimi-k3-vtest"
PORT = 18383
BASE_URL = f"http://127.0.0.1:{PORT}"
API_KEY = "vtest-key-3f9a1c"
CHECKS = ["health", "models", "text", "tool_call", "vision", "two_turn"]


def server_tasks() -> int:
    """Completion tasks llama-server has started so far (one `launch_slot_` log line each)."""
    logs = subprocess.run(["docker", "logs", NAME], capture_output=True, text=True)
    return (logs.stdout + logs.stderr).count("launch_slot_: ")


@pytest.fixture(scope="module")
def hub() -> Iterator[FixtureHub]:
    with demo_hub() as running:
        yield running


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("kimik3-verify")
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["serve"]["api_key_file"] = "api.key"
    (work / "api.key").write_text(f"{API_KEY}\n")
    write_profile(work, profile)
    yield work
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


@pytest.fixture(scope="module")
def serving(workdir: Path) -> Path:
    kimik3(workdir, "apply", "profile.yaml")
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    return workdir


def test_verify_runs_every_check_against_the_server(serving: Path) -> None:
    before = server_tasks()
    result = kimik3(serving, "verify", "--json", "profile.yaml")
    report = json.loads(result.stdout)
    print(json.dumps(report, indent=2))  # shown with -s: what the server really answered
    assert report["profile"] == NAME and report["ok"] is True
    assert [c["name"] for c in report["checks"]] == CHECKS
    assert all(c["ok"] for c in report["checks"]), report
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["models"]["detail"] == f"serves '{NAME}'"
    assert checks["vision"]["detail"] == "skipped: mainline build has no vision"
    for name in ("text", "tool_call", "two_turn"):
        assert "(finish: " in checks[name]["detail"] and checks[name]["seconds"] > 0
    assert checks["two_turn"]["detail"].startswith("sent back ")
    # text, tool_call (plus one retry per parse failure) and two turns reached llama-server.
    assert server_tasks() - before == 4 + report["tool_call_parse_failures"]
    assert API_KEY not in result.stdout + result.stderr


def test_verify_prints_a_table_of_the_checks(serving: Path) -> None:
    result = kimik3(serving, "verify", "profile.yaml")
    for word in ("check", "ok", "seconds", "detail", *CHECKS):
        assert word in result.stdout
    assert "FAIL" not in result.stdout and "Traceback" not in result.stderr
    assert API_KEY not in result.stdout + result.stderr


def test_the_chat_adapter_returns_plain_dicts(serving: Path) -> None:
    chat = OpenAIChat()
    models = chat.models(BASE_URL, API_KEY)
    assert any(NAME in [m["id"], *m.get("aliases", [])] for m in models["data"])
    reply = chat.chat(BASE_URL, API_KEY, [{"role": "user", "content": "Hi"}], max_tokens=4)
    assert reply["message"]["role"] == "assistant" and isinstance(reply["message"]["content"], str)
    assert reply["finish_reason"] in ("stop", "length")
    json.dumps(reply)  # plain data, ready to be sent back


def test_the_chat_adapter_translates_errors_without_the_key(serving: Path) -> None:
    wrong = "wrong-key-77"
    with pytest.raises(PermanentError, match="HTTP 401: Invalid API Key") as refused:
        OpenAIChat().chat(BASE_URL, wrong, [{"role": "user", "content": "Hi"}])
    assert wrong not in str(refused.value) and API_KEY not in str(refused.value)
    nobody = f"http://127.0.0.1:{HttpClient().free_port()}"
    with pytest.raises(TransientError, match="Connection error"):
        OpenAIChat().models(nobody, wrong)


def test_verify_refuses_a_stopped_server(serving: Path) -> None:
    docker("stop", "-t", "5", NAME)
    result = kimik3(serving, "verify", "profile.yaml", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{NAME} is not serving (exited" in result.stderr and "run `kimik3 apply` first" in result.stderr
