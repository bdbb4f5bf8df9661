"""Pins a user can trust: the shipped profiles name branches and tags (never a made-up hash), validate warns of
them and refuses placeholders, plan and apply refuse an unpinned profile naming the field and `kimik3 pin`, and
the pin writer keeps every comment. The hub and registry side of `kimik3 pin`: tests/integration/
test_pin_hub_registry.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.cli_run import cli_run
from support.shipped import pinned_text

from kimik3_reconciler.cli import main
from kimik3_reconciler.model.pinning import Pin, pins
from kimik3_reconciler.model.profile_edit import pinned_from, set_pins
from kimik3_reconciler.model.profile_source import parse_profile

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p for p in (ROOT / "profiles").glob("*.yaml") if "\nkind: Fleet" not in p.read_text())


def run(args: list[str], cwd: Path) -> tuple[int, str, str]:
    return cli_run(args, cwd, DOCKER_HOST=f"unix://{cwd}/no-docker.sock")  # a refusal must come before any host access


@pytest.mark.parametrize(
    "value, made_up",
    [
        ("0123456789abcdef0123456789abcdef01234567", True),
        ("89abcdef0123456789abcdef0123456789abcdef", True),
        ("f" * 40, True),
        ("1234567890123456789012345678901234567890", True),
        ("d3e0c0d2d3e0c0d2d3e0c0d2d3e0c0d2d3e0c0d2", False),  # the demo hub's commit: served, not a placeholder
        ("b0a2feb64c6fbd09f12af230734f072dd819ecb0", False),
        ("main", False),
    ],
)
def test_a_placeholder_commit_is_told_from_a_real_one(value: str, made_up: bool) -> None:
    assert Pin(("model", "revision"), "hub", value, "a/b").made_up is made_up


def test_a_placeholder_digest_is_told_from_a_real_one() -> None:
    ref = "vllm/vllm-openai:kimi-k3@sha256:"
    assert Pin(("image", "ref"), "image", ref + "0" * 64, ref).made_up
    assert not Pin(("image", "ref"), "image", ref + "5e1f" * 16, ref).made_up
    assert not Pin(("image", "ref"), "image", "vllm/vllm-openai:kimi-k3", ref).made_up  # a tag: unpinned instead


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profiles_carry_no_made_up_pin(path: Path) -> None:
    for pin in pins(parse_profile(path.read_text(), path.name).profile):
        assert not pin.made_up, (pin.field, pin.value)
        assert pin.pinned or pin.value == "main" or pin.kind == "image", (pin.field, pin.value)


def test_validate_refuses_a_made_up_pin_and_warns_of_a_branch(tmp_path: Path) -> None:
    """Before: the shipped profiles' `0123456789abcdef…` and `sha256:000…` validated `ok`."""
    placeholder = tmp_path / "vllm.yaml"
    placeholder.write_text(pinned_text(ROOT / "profiles" / "vllm-tp8.yaml"))  # main's old placeholders
    code, stdout, stderr = run(["validate", str(placeholder)], tmp_path)
    assert code == 2 and "ok" not in stdout
    assert f"{placeholder}:13: model.revision: '89abcdef0123456789abcdef0123456789abcdef' looks made up" in stderr
    assert f"{placeholder}:18: image.ref: 'vllm/vllm-openai:kimi-k3@sha256:{'0' * 64}' looks made up" in stderr
    code, stdout, stderr = run(["validate", str(ROOT / "profiles" / "vllm-tp8.yaml")], tmp_path)
    assert code == 0 and stdout.endswith(": ok\n")
    assert "model.revision: 'main' is a branch or tag, not a pin: `kimik3 pin" in stderr
    assert "image.ref: 'vllm/vllm-openai:kimi-k3' is a tag without a digest" in stderr


@pytest.mark.parametrize("command", [["plan"], ["apply"], ["plan", "--json"], ["apply", "--json"], ["status"]])
def test_plan_and_apply_refuse_an_unpinned_profile_naming_the_field(command: list[str], tmp_path: Path) -> None:
    profile = ROOT / "profiles" / "hybrid-q2.yaml"
    code, stdout, stderr = run([*command, str(profile)], tmp_path)
    assert code == 2
    assert (
        f"{profile}:11: model.revision: 'main' is a branch or tag, not a pin: `kimik3 pin {profile}` writes the "
        "commit the hub serves for it now"
    ) in stderr
    assert f"{profile}:16: model.tokenizer.revision:" in stderr
    if "--json" in command:
        problems = json.loads(stdout)["error"]["problems"]
        assert [(p["line"], p["field"]) for p in problems] == [(11, "model.revision"), (16, "model.tokenizer.revision")]
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.json"))


def test_the_pin_writer_keeps_every_comment_and_records_the_branch() -> None:
    text = (ROOT / "profiles" / "hybrid-q2.yaml").read_text()
    commit, tokenizer = "5e1f" * 10, "a7c3" * 10
    pinned = set_pins(
        text, {("model", "revision"): (commit, "main"), ("model", "tokenizer", "revision"): (tokenizer, "main")}
    )
    comments = [line.split("#", 1)[1].strip() for line in text.splitlines() if "#" in line]
    assert all(comment in pinned for comment in comments)
    assert f"  revision: {commit} # pin: main\n" in pinned
    assert f"    revision: {tokenizer}  # pin: main; `kimik3 pin` resolves it too\n" in pinned
    assert pinned_from(pinned, ("model", "revision")) == "main"
    assert len(pinned.splitlines()) == len(text.splitlines())
    loaded = parse_profile(pinned, "p.yaml")
    assert loaded.profile.model.revision == commit and not loaded.warnings
    again = set_pins(pinned, {("model", "revision"): ("9d0b" * 10, "main")})  # an update replaces the record
    assert "# pin: main # pin" not in again and pinned_from(again, ("model", "revision")) == "main"


def test_pin_refuses_a_made_up_pin_before_asking_anyone(tmp_path: Path) -> None:
    """Before: `kimik3 pin` called the placeholder `pinned (no branch or tag recorded)`, exit 0, and pinned the rest
    around it: the user ran the command meant to give real pins and still held a made-up one."""
    profile = tmp_path / "vllm.yaml"
    profile.write_text(pinned_text(ROOT / "profiles" / "vllm-tp8.yaml"))
    before = profile.read_text()
    code, stdout, stderr = run(["pin", str(profile)], tmp_path)
    assert code == 2 and stdout == ""
    assert f"{profile}:13: model.revision: '89abcdef0123456789abcdef0123456789abcdef' looks made up" in stderr
    assert f"write the branch or tag (revision: main) and run `kimik3 pin {profile}`" in stderr
    assert profile.read_text() == before


def test_pin_update_leaves_an_image_pinned_by_digest_alone(tmp_path: Path) -> None:
    """Before: `pin --update` of `ref: repo@sha256:…` (no tag to resolve) was exit 3, "names no tag to resolve"; the
    digest is the pin, as a commit without a `# pin:` record is, so it is left as it is (no registry asked)."""
    text = (ROOT / "profiles" / "vllm-tp8.yaml").read_text()
    ref, commit = "vllm/vllm-openai@sha256:" + "5e1f" * 16, "b0a2feb64c6fbd09f12af230734f072dd819ecb0"
    profile = tmp_path / "vllm.yaml"
    profile.write_text(
        text.replace("  ref: vllm/vllm-openai:kimi-k3\n", f"  ref: {ref}\n").replace(
            "  revision: main\n", f"  revision: {commit}\n"
        )
    )
    before = profile.read_text()
    code, stdout, stderr = run(["pin", "--update", "--json", str(profile)], tmp_path)
    assert code == 0, stderr
    rows = json.loads(stdout)["pins"]
    assert [(r["field"], r["from"], r["value"], r["changed"]) for r in rows] == [
        ("model.revision", None, commit, False),
        ("image.ref", None, ref, False),
    ]
    code, stdout, _ = run(["pin", "--update", str(profile)], tmp_path)  # said as not asked, never "unchanged"
    assert code == 0 and stdout.count("pinned (no branch or tag recorded)") == 2 and "unchanged" not in stdout
    assert profile.read_text() == before


def test_force_unlock_takes_an_unpinned_profile(tmp_path: Path) -> None:
    """Before: force-unlock refused a profile naming `revision: main` (exit 2, `kimik3 pin`): a hung run's lock
    could not be removed without asking the hub; it reads only the profile's name and RPC workers."""
    result = CliRunner().invoke(
        main,
        ["force-unlock", "0000", str(ROOT / "profiles" / "hybrid-q2.yaml")],
        env={"KIMIK3_STATE_DIR": str(tmp_path / "state"), "KIMIK3_HOST_LOCK": str(tmp_path / "host.lock")},
    )
    assert result.exit_code == 2 and "no lock 0000: the host is not locked" in result.stderr, result.stderr
