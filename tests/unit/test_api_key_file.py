"""serve.api_key_file as llama-server reads it: a file without a usable key is refused at plan (exit 2, field and
file:line named, the key never shown), and verify and the exporter send the key the server holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.api_keys import api_keys, key_file_problem
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


@pytest.mark.parametrize(("text", "wanted"), [
    ("", "holds no key"),
    ("\n\n", "holds no key"),
    ("# the key goes here\n", "holds no key"),
    ("sk-secret-value\r\n", "line 1: a key holds whitespace, a carriage return"),
    ("# comment\nsk secret\n", "line 2: a key holds whitespace"),
])
def test_a_key_file_without_a_usable_key_says_why_without_the_key(text: str, wanted: str) -> None:
    problem = key_file_problem(text)
    assert problem is not None and problem.startswith(wanted)
    assert "secret" not in problem  # the message goes to the terminal and logs: never the key


def _collect(tmp_path: Path, content: bytes) -> InputError:
    (tmp_path / "api.key").write_bytes(content)
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    from support.fakes.state import MemoryState

    with pytest.raises(InputError) as refused:
        collect_inputs(parse_profile(PROFILE, "k3.yaml").profile, tmp_path, tmp_path / "Dockerfile", MemoryState())
    return refused.value


@pytest.mark.parametrize("content", [b"", b"#sk-commented-out\n", b"sk-abc\r\n", b"\xff\xfe", b"x" * (65 * 1024)])
def test_plan_refuses_an_unusable_key_file_naming_the_field(tmp_path: Path, content: bytes) -> None:
    """Before: an empty key file planned and launched `--api-key-file` with no key: an open server."""
    error = _collect(tmp_path, content)
    assert str(error).startswith("serve.api_key_file: api.key ") and error.fields == (("serve", "api_key_file"),)
    assert "sk-" not in str(error)


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
    from kimik3_reconciler.model.metrics import ExporterConfig

    key_file = tmp_path / "api.key"
    key_file.write_text("# rotated 2026-12\nsk-first\nsk-second\n")
    config = ExporterConfig(profile="k3", labels={}, bind="127.0.0.1", port=9100, container="k3",
                            server_url="http://127.0.0.1:8080", api_key_file=str(key_file))
    assert DeploymentCollector(config, ports=None)._api_key() == "sk-first"  # type: ignore[arg-type]
