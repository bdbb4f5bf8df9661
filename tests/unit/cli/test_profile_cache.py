"""The profile cache (cli/profile_cache.py): a profile validated before is built from the cache as the same
values, warnings and key lines as a validation gives; the key is the text and the code, never the file's
mtime; a corrupt, foreign or torn entry is ignored and replaced; errors are never cached; concurrent
writers leave one whole entry."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml

from kimik3_reconciler.cli import profile_cache
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.model.profile_source import parse_profile

ROOT = Path(__file__).resolve().parents[3]
OK_CASES = [
    p
    for p in sorted((ROOT / "tests" / "cases" / "profile").glob("*.yaml"))
    if yaml.safe_load(p.read_text())["expect"] == "ok"
]
DEMO = (ROOT / "profiles" / "demo-cpu.yaml").read_text()


def _entries(state: Path) -> list[Path]:
    return sorted((state / "profiles").glob("*.json"))


@pytest.mark.parametrize(
    "path",
    [*OK_CASES, *sorted(p for p in (ROOT / "profiles").glob("*.yaml") if "\nkind: Fleet" not in p.read_text())],
    ids=lambda p: p.stem,
)
def test_a_cache_hit_is_the_validation(tmp_path: Path, path: Path) -> None:
    text = yaml.safe_load(path.read_text())["profile"] if "cases" in path.parts else path.read_text()
    validated = parse_profile(text, "a.yaml")
    profile_cache.load(tmp_path, text, "first.yaml")  # a miss: validates and keeps it
    hit = profile_cache.load(tmp_path, text, "a.yaml")
    assert len(_entries(tmp_path)) == 1
    assert hit == validated and hit.tree == validated.tree and dict(hit.lines) == dict(validated.lines)
    assert hit.profile.model_dump(mode="json") == validated.profile.model_dump(mode="json")
    assert [str(w) for w in hit.warnings] == [str(w) for w in validated.warnings]  # named as read now
    assert hit.where(("serve", "port")) == validated.where(("serve", "port")) and hit.text == text


def test_the_key_is_the_content_not_the_mtime(tmp_path: Path) -> None:
    first = profile_cache.load(tmp_path, DEMO, "p.yaml")
    edited = profile_cache.load(tmp_path, DEMO.replace("port: 18181", "port: 18182"), "p.yaml")
    assert (first.profile.serve.port, edited.profile.serve.port) == (18181, 18182) and len(_entries(tmp_path)) == 2


def test_a_corrupt_or_foreign_entry_is_ignored_and_replaced(tmp_path: Path) -> None:
    profile_cache.load(tmp_path, DEMO, "p.yaml")
    (entry,) = _entries(tmp_path)
    good = json.loads(entry.read_text())
    edited = {**good, "tree": {**good["tree"], "fields": {**good["tree"]["fields"], "name": "someone-else"}}}
    for broken in (
        b"",
        b"{",
        json.dumps(edited).encode(),
        json.dumps({**good, "key": "0" * 64}).encode(),
        b"[]",
        b"\xff\xfe",
    ):  # torn, truncated, edited (digest), another key, another shape, not UTF-8
        entry.write_bytes(broken)
        assert profile_cache.load(tmp_path, DEMO, "p.yaml").profile.name == "kimi-k3-demo"
        assert json.loads(entry.read_text()) == good  # validated again, written whole


def test_another_kimik3_or_pydantic_is_another_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = profile_cache.cache_key(DEMO)
    monkeypatch.setattr(profile_cache, "code_identity", lambda: b"another model package")
    assert profile_cache.cache_key(DEMO) not in (key, None)


def test_errors_are_not_cached_and_keep_their_lines(tmp_path: Path) -> None:
    broken = DEMO.replace("port: 18181", 'port: "18181"')
    for _ in range(2):
        with pytest.raises(ProfileError) as caught:
            profile_cache.load(tmp_path, broken, "bad.yaml")
        assert any(str(p).startswith("bad.yaml:") and "serve.port" in str(p) for p in caught.value.problems)
    assert _entries(tmp_path) == []


def test_an_unwritable_cache_dir_only_means_validating_again(tmp_path: Path) -> None:
    (tmp_path / "profiles").write_text("not a folder")
    assert profile_cache.load(tmp_path, DEMO, "p.yaml").profile.name == "kimi-k3-demo"


def test_concurrent_writers_leave_one_whole_entry(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(5):
                assert profile_cache.load(tmp_path, DEMO, "p.yaml").profile.name == "kimi-k3-demo"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(_entries(tmp_path)) == 1
    assert not [p for p in (tmp_path / "profiles").iterdir() if p.suffix == ".tmp"]
    assert json.loads(_entries(tmp_path)[0].read_text())["key"] == profile_cache.cache_key(DEMO)


def test_old_entries_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_cache, "KEEP", 3)
    for port in range(18190, 18196):
        profile_cache.load(tmp_path, DEMO.replace("port: 18181", f"port: {port}"), "p.yaml")
    assert len(_entries(tmp_path)) == 3


def test_the_key_names_the_interpreter(monkeypatch):
    """Validation uses the stdlib (ipaddress): another Python must not be served this one's validations."""
    from kimik3_reconciler.cli import profile_cache

    profile_cache.code_identity.cache_clear()
    before = profile_cache.code_identity()
    monkeypatch.setattr(profile_cache.sys, "version", "3.99.0 (another interpreter)")
    profile_cache.code_identity.cache_clear()
    try:
        assert before is not None and profile_cache.code_identity() != before
    finally:
        monkeypatch.undo()
        profile_cache.code_identity.cache_clear()
