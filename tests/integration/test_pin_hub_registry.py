"""`kimik3 pin` against the real parts: the huggingface_hub client asking the local hub fixture (kimik3_demo/hub.py)
what commit `main` is, and the HTTP API of a real registry on loopback (scripts/ensure-registry.sh) what digest a
tag is, for an image built and pushed here. The shipped profiles are pinned in place (comments kept), validate
clean, and plan no longer refuses them as unpinned; `--update` follows a moved branch; an unknown branch is exit 6
with the file untouched. Seconds (the registry half builds a one-layer image)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli_run import cli_run
from support.realparts import require_docker_and_demo_hub
from support.registry import loopback_registry, push_random_image

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_reconciler.cli.inputs import load

ROOT = Path(__file__).resolve().parents[2]
GGUF, NATIVE = "unsloth/Kimi-K3-GGUF", "moonshotai/Kimi-K3"


def _commit(word: str) -> str:
    return hashlib.sha1(word.encode()).hexdigest()


def _hub(tmp_path: Path, generation: str) -> FixtureHub:
    (tmp_path / "config.json").write_text("{}")
    return FixtureHub(
        [
            FixtureRepo(GGUF, _commit(f"gguf-{generation}"), {"config.json": tmp_path / "config.json"}),
            FixtureRepo(NATIVE, _commit(f"native-{generation}"), {"config.json": tmp_path / "config.json"}),
        ]
    )


def _served_by(text: str, hub: str) -> str:
    return text.replace("  repo: unsloth/Kimi-K3-GGUF\n", f"  repo: unsloth/Kimi-K3-GGUF\n  endpoint: {hub}\n").replace(
        "  repo: moonshotai/Kimi-K3\n  # A", f"  repo: moonshotai/Kimi-K3\n  endpoint: {hub}\n  # A"
    )


def run(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    return cli_run(args, tmp_path, HF_TOKEN=None, HF_HUB_OFFLINE=None)


def test_pin_resolves_branches_at_the_hub_keeping_comments(tmp_path: Path) -> None:
    with _hub(tmp_path, "one") as hub:
        profile = tmp_path / "hybrid-q2.yaml"
        before = _served_by((ROOT / "profiles" / "hybrid-q2.yaml").read_text(), hub.url)
        profile.write_text(before)
        code, _, stderr = run(["plan", str(profile)], tmp_path)
        assert code == 2 and "'main' is a branch or tag, not a pin: `kimik3 pin" in stderr
        code, stdout, stderr = run(["pin", str(profile)], tmp_path)
        assert code == 0, stderr
        assert f"model.revision: main -> {_commit('gguf-one')}" in stdout
        assert f"model.tokenizer.revision: main -> {_commit('native-one')}" in stdout
        after = profile.read_text()
        assert f"  revision: {_commit('gguf-one')} # pin: main\n" in after
        assert f"    revision: {_commit('native-one')}  # pin: main; `kimik3 pin` resolves it too\n" in after
        comments = [line.split("#", 1)[1].strip() for line in before.splitlines() if "#" in line]
        assert all(comment in after for comment in comments)
        assert [l for l in after.splitlines() if "revision" not in l] == [
            l for l in before.splitlines() if "revision" not in l
        ]
        assert not load(str(profile)).warnings  # pinned: plan and apply take it
        code, stdout, stderr = run(["validate", str(profile)], tmp_path)
        assert code == 0 and stderr == ""
        code, stdout, _ = run(["pin", str(profile)], tmp_path)  # nothing unpinned: nothing written
        assert code == 0 and profile.read_text() == after and "--update resolves it again" in stdout
    with _hub(tmp_path, "two") as moved:  # the branch moved on the hub
        profile.write_text(after.replace(hub.url, moved.url))
        code, stdout, _ = run(["pin", "--update", "--json", str(profile)], tmp_path)
        assert code == 0 and json.loads(stdout)["written"] is True
        assert f"  revision: {_commit('gguf-two')} # pin: main\n" in profile.read_text()


def test_an_unknown_branch_is_the_hubs_error_and_nothing_is_written(tmp_path: Path) -> None:
    with _hub(tmp_path, "one") as hub:
        profile = tmp_path / "p.yaml"
        profile.write_text(
            _served_by((ROOT / "profiles" / "allvram-iq2xxs.yaml").read_text(), hub.url).replace(
                "  revision: main\n", "  revision: no-such-branch\n", 1
            )
        )
        before = profile.read_text()
        code, stdout, stderr = run(["pin", "--json", str(profile)], tmp_path)
        assert code == 6 and "no-such-branch" in stderr and "revision not found" in stderr
        assert json.loads(stdout)["error"]["exit_code"] == 6
        assert profile.read_text() == before


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_docker_and_demo_hub()
    with loopback_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.mark.docker
def test_pin_resolves_an_image_tag_at_the_registry(registry: str, tmp_path: Path) -> None:
    tag, digest = push_random_image(registry, "kimik3-pin/tiny", tmp_path)
    with _hub(tmp_path, "one") as hub:
        profile = tmp_path / "vllm-tp8.yaml"
        profile.write_text(
            _served_by((ROOT / "profiles" / "vllm-tp8.yaml").read_text(), hub.url).replace(
                "  ref: vllm/vllm-openai:kimi-k3\n", f"  ref: {tag}\n"
            )
        )
        code, stdout, stderr = run(["pin", "--dry-run", str(profile)], tmp_path)
        assert code == 0 and f"image.ref: {tag} -> {tag}@{digest}" in stdout and "would write 2 pin(s)" in stderr
        assert f"  ref: {tag}\n" in profile.read_text()  # --dry-run wrote nothing
        code, stdout, stderr = run(["pin", str(profile)], tmp_path)
        assert code == 0, stderr
        text = profile.read_text()
        assert f"  ref: {tag}@{digest}\n" in text and f"  revision: {_commit('native-one')} # pin: main\n" in text
        assert load(str(profile)).profile.image.digest == digest


def test_pin_through_a_symlink_writes_the_profile_it_names(tmp_path: Path) -> None:
    """Before: the rename replaced the link with a pinned copy; the profile it named (the one kept in git, say)
    stayed unpinned. Now the file behind the link is rewritten and the link stays a link."""
    with _hub(tmp_path, "one") as hub:
        real = tmp_path / "profiles" / "allvram.yaml"
        real.parent.mkdir()
        real.write_text(_served_by((ROOT / "profiles" / "allvram-iq2xxs.yaml").read_text(), hub.url))
        link = tmp_path / "current.yaml"
        link.symlink_to(real)
        code, _, stderr = run(["pin", str(link)], tmp_path)
        assert code == 0, stderr
        assert link.is_symlink() and link.resolve() == real
        assert f"  revision: {_commit('gguf-one')} # pin: main\n" in real.read_text()
