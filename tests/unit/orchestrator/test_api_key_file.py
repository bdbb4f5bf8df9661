"""serve.api_key_file as llama-server reads it: a file without a usable key is refused where a launch is planned
(exit 2, field and file:line named, the key never shown) while destroy/status/prune go on, and verify and the exporter send the key the server holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION
from support.payloads import exporter_config

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.api_keys import api_keys, key_file_problem, sendable_key
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.local_inputs import collect_inputs

PROFILE = """apiVersion: kimik3/v1
name: k3
model: {repo: org/k3, revision: %s, quant: UD-Q2_K_XL}
gpus: [0]
serve:
  api_key_file: api.key
""" % ("ab" * 20)


def test_keys_are_the_lines_llama_server_takes() -> None:
    assert api_keys("# prod\nsk-one\n\nsk-two\n") == ("sk-one", "sk-two")
    assert api_keys("sk-crlf\r\n") == ("sk-crlf\r",)  # std::getline splits on LF only: the CR stays in the key


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("", "holds no key"),
        ("\n\n", "holds no key"),
        ("# the key goes here\n", "holds no key"),
        ("sk-secret-value\r\n", "line 1: a key holds whitespace, a carriage return"),
        ("# comment\nsk secret\n", "line 2: a key holds whitespace"),
    ],
)
def test_a_key_file_without_a_usable_key_says_why_without_the_key(text: str, wanted: str) -> None:
    problem = key_file_problem(text, "llama-server")
    assert problem is not None and problem.startswith(wanted)
    assert "secret" not in problem  # the message goes to the terminal and logs: never the key
    # The server the message names is the engine's (was: llama-server, whatever the engine).
    assert "llama-server" in problem and "vllm serve" in (key_file_problem(text, "vllm serve") or "")


def _collect(tmp_path: Path, content: bytes):
    (tmp_path / "api.key").write_bytes(content)
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    from support.fakes.state import MemoryState

    return collect_inputs(parse_profile(PROFILE, "k3.yaml").profile, tmp_path, tmp_path / "Dockerfile", MemoryState())


@pytest.mark.parametrize("content", [b"", b"#sk-commented-out\n", b"sk-abc\r\n", b"\xff\xfe", b"x" * (65 * 1024)])
def test_observation_records_why_a_key_file_is_unusable_never_the_key(tmp_path: Path, content: bytes) -> None:
    """Only recorded: observation serves destroy/status/prune too (refused there, the open server the rule is
    about could not be torn down)."""
    inputs = _collect(tmp_path, content)
    assert inputs.api_key_problem and "sk-" not in inputs.api_key_problem
    assert inputs.api_key_file == str(tmp_path / "api.key")


def test_a_usable_key_file_records_no_problem(tmp_path: Path) -> None:
    assert _collect(tmp_path, b"# prod\nsk-abc\n").api_key_problem is None


def test_an_unreadable_key_file_is_an_input_error_naming_the_field(tmp_path: Path, monkeypatch) -> None:
    """Before: EACCES on the key file was exit 8 with no field named."""
    import builtins

    real_open = builtins.open

    def denied(path, *args, **kwargs):
        if str(path).endswith("api.key"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    with pytest.raises(InputError) as refused:
        _collect(tmp_path, b"sk-abc\n")
    assert str(refused.value) == "serve.api_key_file: api.key cannot be read: Permission denied"
    assert refused.value.fields == (("serve", "api_key_file"),) and refused.value.exit_code == 2


KEYED_PROFILE = FAKE_PROFILE.replace("serve: {port: 18999,", "serve: {api_key_file: api.key, port: 18999,")


@pytest.fixture
def orchestrated(tmp_path: Path):
    from support.fakes import FakeHub, fake_ports

    from kimik3_reconciler.orchestrator import Orchestrator
    from kimik3_reconciler.steps.report import NullReporter

    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    (tmp_path / "api.key").write_text("sk-abc\n")
    hub = FakeHub("org/k3", FAKE_REVISION, {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard"}, tmp_path / "hub")
    ports, docker = fake_ports(hub)
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), docker, tmp_path


@pytest.mark.parametrize("content", [b"", b"# no key yet\n", b"sk-abc\r\n"])
def test_plan_and_apply_refuse_a_launch_but_destroy_and_status_go_on(orchestrated, content: bytes) -> None:
    """The deployment the rule is about (a server answering anyone) must still be torn down: before, observation
    refused the key file for every command, so `destroy` (even --dry-run) and `status` exited 2."""
    orchestrator, docker, tmp_path = orchestrated
    loaded = parse_profile(KEYED_PROFILE, "k3.yaml")
    orchestrator.apply(loaded)
    assert docker.containers
    (tmp_path / "api.key").write_bytes(content)
    for refused_by in (orchestrator.plan, orchestrator.apply):
        with pytest.raises(InputError) as refused:
            refused_by(loaded)
        assert str(refused.value).startswith("serve.api_key_file: api.key ") and "sk-" not in str(refused.value)
        assert "at k3.yaml:" in str(refused.value) and refused.value.exit_code == 2
    observed = orchestrator.observe(loaded, stat_only=True)  # what `status` reads
    assert observed.inputs.api_key_problem
    dry = orchestrator.destroy(loaded, images=False, model=False, execute_steps=False)
    assert any(s.kind == "container" for s in dry.steps) and docker.containers
    orchestrator.destroy(loaded, images=False, model=False)
    assert not docker.containers


def test_a_directory_or_device_is_not_reported_as_missing(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    from support.fakes.state import MemoryState

    for raw, what in ((str(tmp_path), "is a directory"), ("/dev/null", "is not a regular file")):
        text = PROFILE.replace("api.key", raw)
        with pytest.raises(InputError) as refused:
            collect_inputs(parse_profile(text, "k3.yaml").profile, tmp_path, tmp_path / "Dockerfile", MemoryState())
        assert f"{raw} {what}" in str(refused.value)


def test_the_exporter_sends_the_first_key_the_server_holds(tmp_path: Path) -> None:
    """Before: the exporter sent the whole file stripped (a comment line and every key, newlines included);
    verify reads the key through the same api_keys()."""
    from kimik3_reconciler.exporter.collect import DeploymentCollector

    key_file = tmp_path / "api.key"
    key_file.write_text("# rotated 2026-12\nsk-first\nsk-second\n")
    config = exporter_config(api_key_file=str(key_file))
    assert DeploymentCollector(config, ports=None)._api_key() == "sk-first"  # type: ignore[arg-type]


def test_a_saved_plan_is_not_applied_once_the_key_file_lost_its_key(orchestrated) -> None:
    """`apply PLAN` plans again before it runs anything: the emptied key file is refused there too."""
    orchestrator, docker, tmp_path = orchestrated
    loaded = parse_profile(KEYED_PROFILE, "k3.yaml")
    _, saved = orchestrator.save_plan(loaded, str(tmp_path / "k3.yaml"))
    (tmp_path / "api.key").write_bytes(b"\n")
    with pytest.raises(InputError, match="serve.api_key_file: api.key holds no key"):
        orchestrator.apply_saved(loaded, saved, KEYED_PROFILE)
    assert not docker.containers


def test_verify_bench_and_tune_send_the_key_or_say_why_they_cannot(orchestrated) -> None:
    """An empty key file: the server holds no key, checks run unauthenticated (the deployment can still be verified
    and torn down). A key no header can carry (CRLF): exit 2 naming the field, not a traceback in the HTTP client."""
    from kimik3_reconciler.verify import _sent_key

    orchestrator, _, tmp_path = orchestrated
    loaded = parse_profile(KEYED_PROFILE, "k3.yaml")
    for content, wanted in ((b"# rotated\nsk-abc\n", "sk-abc"), (b"", None), (b"#\n\n", None)):
        (tmp_path / "api.key").write_bytes(content)
        assert _sent_key(loaded, orchestrator.observe(loaded)) == wanted
    for content in (b"sk-abc\r\n", b"\xff\xfe"):
        (tmp_path / "api.key").write_bytes(content)
        with pytest.raises(InputError) as refused:
            _sent_key(loaded, orchestrator.observe(loaded))
        assert str(refused.value).startswith("serve.api_key_file: api.key ") and "sk-" not in str(refused.value)


# Keys in a key file and what a real llama-server did with each sent as `Authorization: Bearer <key>` through the
# exporter's HTTP client (adapters/http.HttpClient.get on /metrics): the CPU image's llama-server (mainline
# ad1de39, b11434 source), `--api-key-file` holding these lines, run natively on the dev machine, 2026-12-03.
SERVER_ACCEPTED = {"plain": True, "sk in side": True, "sk\ttab": True, " lead": True, "trail ": False}


@pytest.mark.parametrize(("key", "accepted"), SERVER_ACCEPTED.items())
def test_the_exporter_sends_exactly_the_keys_the_server_can_match(key: str, accepted: bool, tmp_path: Path) -> None:
    """The exporter's key check (model/api_keys.sendable_key) against what llama-server did: a key with a space or
    a tab inside is matched (so the exporter sends it, though the profile rule refuses such a key before a launch:
    a server launched with one before the rule keeps being scraped); a trailing blank is dropped by the server's
    HTTP parser (401 whatever is sent), so it is not sent."""
    from kimik3_reconciler.exporter.collect import DeploymentCollector

    key_file = tmp_path / "api.key"
    key_file.write_bytes(f"# the server's key\n{key}\n".encode())
    config = exporter_config(api_key_file=str(key_file))
    sent = DeploymentCollector(config, ports=None)._api_key()  # type: ignore[arg-type]
    assert sent == (key if accepted else None)
    assert (sendable_key(key) is not None) is accepted


@pytest.mark.parametrize("key", ["sk-abc\r", "clé", "sk\x01abc", "", " ", "\t"])
def test_keys_no_header_carries_as_the_server_holds_them_are_not_sendable(key: str) -> None:
    assert sendable_key(key) is None  # a CR (CRLF file), non-ASCII (sent latin-1, held UTF-8), a control, blanks
