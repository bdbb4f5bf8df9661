"""Tab and newline in serve.env values and serve.extra_args items (a multi-line --chat-template): accepted, handed to
the container as written (docker API: no shell, no unit file), and shown escaped in the plan, one line per diff."""

from __future__ import annotations

from pathlib import Path

from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

from kimik3_reconciler.model.plan import DiffItem, shown
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.render import render_plan
from kimik3_reconciler.steps.report import NullReporter

TEMPLATE = "{% for m in messages %}\n\t{{ m.content }}\n{% endfor %}"


def test_shown_escapes_control_characters_only() -> None:
    assert shown("a\tb\nc\x1b[31m é") == "a\\tb\\nc\\x1b[31m é"
    assert (
        str(DiffItem("container.argv", None, "--chat-template x\ny"))
        == "container.argv: (none) → --chat-template x\\ny"
    )


def test_a_multi_line_chat_template_reaches_the_container_as_written_and_the_plan_escaped(tmp_path: Path) -> None:
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    hub = FakeHub("org/k3", FAKE_REVISION, {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard"}, tmp_path / "hub")
    ports, docker = fake_ports(hub)
    orchestrator = Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    orchestrator.apply(parse_profile(FAKE_PROFILE, "k3.yaml"))
    escaped = TEMPLATE.replace("\n", "\\n").replace("\t", "\\t")  # as a double-quoted YAML scalar writes it
    text = FAKE_PROFILE.replace(
        "serve: {port: 18999,",
        f'serve: {{extra_args: [--chat-template, "{escaped}"], env: {{MY_NOTE: "a\\tb"}}, port: 18999,',
    )
    loaded = parse_profile(text, "k3.yaml")
    assert loaded.profile.serve.extra_args == ["--chat-template", TEMPLATE]
    plan = orchestrator.plan(loaded)
    lines = [str(item) for step in plan.steps for item in step.diff]
    argv = [line for line in lines if "--chat-template" in line]
    assert argv and all("\n" not in line and "\t" not in line for line in lines)
    assert "\\n\\t{{ m.content }}\\n" in argv[0]
    printed: list[str] = []

    class Lines:  # the console render_plan prints to: each Styled line's text
        def print(self, *objects, **options) -> None:
            printed.extend(o.plain for o in objects)

    render_plan(plan, Lines())  # type: ignore[arg-type]
    assert any("\\n\\t{{ m.content }}" in line for line in printed)
    assert not any("\n" in line or "\t" in line for line in printed)
    orchestrator.apply(loaded)
    (container,) = docker.containers.values()
    assert container["spec"].command[-2:] == ("--chat-template", TEMPLATE)
    assert ("MY_NOTE", "a\tb") in container["spec"].env
