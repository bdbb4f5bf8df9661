"""`kimik3 verify` and the openai chat adapter against a real llama-server container.

Same preparation as test_reconcile_docker.py (demo hub fixture, demo-cpu profile, the cached CPU
image), under its own container name and port so both modules can run at once. The profile sets
an API key, so every request below also proves the key is sent, and never printed. The demo's
weights are random (its GGUF says so: kimik3.weights = random): what the model says is "not
checkable", never "ok"; the failing paths of real weights: unit/verify/test_verify_stub_server.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import fresh_work
from support.realparts import demo_profile, docker, kimik3, write_profile

from kimik3_demo.hub import FixtureHub
from kimik3_reconciler.adapters.http import HttpClient
from kimik3_reconciler.adapters.openai_chat import OpenAIChat
from kimik3_reconciler.errors import PermanentError, TransientError
from kimik3_reconciler.ports import ChatRequest

pytestmark = pytest.mark.docker

NAME = "k3vc-verify"
PORT = 18749
BASE_URL = f"http://127.0.0.1:{PORT}"
API_KEY = "vtest-key-3f9a1c"
CHECKS = ["health", "models", "text", "tool_call", "vision", "two_turn"]


def server_tasks() -> int:
    """Completion tasks llama-server has started so far (one `launch_slot_` log line each)."""
    logs = subprocess.run(["docker", "logs", NAME], capture_output=True, text=True)
    return (logs.stdout + logs.stderr).count("launch_slot_: ")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = fresh_work(tmp_path_factory, "kimik3-verify", NAME)
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["serve"]["api_key_file"] = "api.key"
    (work / "api.key").write_text(f"{API_KEY}\n")
    write_profile(work, profile)
    yield work
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


@pytest.fixture
def serving(workdir: Path) -> Path:
    """Applied before each test (a no-op when converged): a test that stopped the server (the last one here) leaves
    none stopped for the tests after it, in whatever order they run."""
    kimik3(workdir, "apply", "profile.yaml")
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    return workdir


def test_verify_runs_every_check_against_the_server(serving: Path) -> None:
    before = server_tasks()
    result = kimik3(serving, "verify", "--json", "profile.yaml")
    report = json.loads(result.stdout)
    print(json.dumps(report, indent=2))  # shown with -s: what the server really answered
    assert report["profile"] == NAME and report["ok"] is True and result.returncode == 0
    # ok: true is "nothing failed"; what it says of the model is beside it, never a plain "ok"
    assert report["content"] == "not checkable (random weights)" and report["inconclusive"] == []
    assert report["summary"] == "plumbing ok; content not checkable (random weights)"
    assert [c["name"] for c in report["checks"]] == CHECKS
    checks = {c["name"]: c for c in report["checks"]}
    assert {n: c["status"] for n, c in checks.items()} == {
        "health": "ok",
        "models": "ok",
        "text": "not checkable",
        "tool_call": "not checkable",
        "vision": "skipped",
        "two_turn": "not checkable",
    }
    assert report["weights"]["random"] is True and "kimik3.weights = 'random'" in report["weights"]["source"]
    assert report["not_checkable"] == ["text", "tool_call", "two_turn"]
    assert checks["models"]["detail"] == f"serves '{NAME}'"
    assert checks["vision"]["detail"] == "skipped: mainline build has no vision"
    for name in ("text", "tool_call", "two_turn"):  # the plumbing answered; nothing was judged
        assert checks[name]["ok"] is None and checks[name]["detail"].startswith("not checkable (random weights)")
        assert "(finish: " in checks[name]["detail"] and checks[name]["seconds"] > 0
    assert "sent back " in checks["two_turn"]["detail"]
    # text, each tool_call attempt (one per parse failure retried) and turn 2 reached llama-server.
    assert server_tasks() - before == 2 + report["tool_calls"]["attempts"]
    assert report["tool_calls"]["attempts"] == 1 + report["tool_calls"]["retries"]
    assert API_KEY not in result.stdout + result.stderr


def test_verify_prints_a_table_of_the_checks(serving: Path) -> None:
    result = kimik3(serving, "verify", "profile.yaml")
    for word in ("check", "result", "seconds", "detail", "not checkable", "weights: random", "tool calls: ", *CHECKS):
        assert word in result.stdout
    assert "FAIL" not in result.stdout and "Traceback" not in result.stderr
    assert "verify: plumbing ok; content not checkable (random weights)" in " ".join(result.stdout.split())
    assert API_KEY not in result.stdout + result.stderr


def test_the_chat_adapter_returns_plain_dicts(serving: Path) -> None:
    chat = OpenAIChat()
    models = chat.models(BASE_URL, API_KEY)
    assert any(NAME in [m["id"], *m.get("aliases", [])] for m in models["data"])
    reply = chat.chat(ChatRequest(BASE_URL, API_KEY, [{"role": "user", "content": "Hi"}], max_tokens=4))
    assert reply["message"]["role"] == "assistant" and isinstance(reply["message"]["content"], str)
    assert reply["finish_reason"] in ("stop", "length")
    json.dumps(reply)  # plain data, ready to be sent back
    # the K3 template's thinking_effort travels as chat_template_kwargs; the demo's ChatML template ignores it
    low = chat.chat(
        ChatRequest(BASE_URL, API_KEY, [{"role": "user", "content": "Hi"}], max_tokens=4, thinking_effort="low")
    )
    assert low["message"]["role"] == "assistant"


def test_the_chat_adapter_renders_the_servers_chat_template(serving: Path) -> None:
    messages = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Oslo: call the tool."},
        {"role": "user", "content": "And tomorrow?"},
    ]
    prompt = OpenAIChat().apply_template(ChatRequest(BASE_URL, API_KEY, messages))
    # the demo's ChatML template (engines/llamacpp/smoke_model.py) renders role and content only: it drops the
    # thinking, which is why verify judges the prompt only on real weights (K3's template keeps it)
    assert "<|im_start|>user\nWhat is the weather in Oslo?<|im_end|>" in prompt
    assert "<|im_start|>assistant\nLet me look.<|im_end|>" in prompt and "Oslo: call the tool." not in prompt


def test_the_chat_adapter_translates_errors_without_the_key(serving: Path) -> None:
    wrong = "wrong-key-77"
    with pytest.raises(PermanentError, match="HTTP 401: Invalid API Key") as refused:
        OpenAIChat().chat(ChatRequest(BASE_URL, wrong, [{"role": "user", "content": "Hi"}]))
    assert wrong not in str(refused.value) and API_KEY not in str(refused.value)
    nobody = f"http://127.0.0.1:{HttpClient().free_port()}"
    with pytest.raises(TransientError, match="Connection error"):
        OpenAIChat().models(nobody, wrong)


def test_verify_refuses_a_stopped_server(serving: Path) -> None:
    docker("stop", "-t", "5", NAME)
    result = kimik3(serving, "verify", "profile.yaml", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{NAME} is not serving (exited" in result.stderr and "run `kimik3 apply` first" in result.stderr
