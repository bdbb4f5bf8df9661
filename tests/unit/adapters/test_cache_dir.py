"""kimik3's cache dir (adapters/cache_files.py): KIMIK3_CACHE_DIR, else $XDG_CACHE_HOME/kimik3, else
~/.cache/kimik3. `plan` keeps its caches (profile validations, a source archive's sha256) there and never
creates or writes the state dir; a cache dir that cannot be written only costs speed: same output, same exit
code, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

from kimik3_reconciler import adapters, cli
from kimik3_reconciler.adapters.cache_files import CacheFiles, cache_dir
from kimik3_reconciler.adapters.state_files import StateFiles

FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard-one" * 10}


def test_the_cache_dir_is_kimik3_cache_dir_else_xdg_else_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KIMIK3_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("KIMIK3_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "kimik3"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # invalid per the XDG spec: ignored
    assert cache_dir() == tmp_path / "home" / ".cache" / "kimik3"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == tmp_path / "home" / ".cache" / "kimik3"


def test_entries_round_trip_and_a_torn_or_foreign_one_is_a_miss(tmp_path: Path) -> None:
    cache = CacheFiles(tmp_path)
    cache.write("sha256/a.json", {"sha256": "ab"})
    assert cache.read("sha256/a.json") == {"sha256": "ab"}
    assert not [p for p in (tmp_path / "sha256").iterdir() if p.suffix == ".tmp"]  # renamed into place
    (tmp_path / "sha256" / "a.json").write_text('{"sha256": "a')  # torn
    assert cache.read("sha256/a.json") is None
    (tmp_path / "sha256" / "a.json").write_text("[1, 2]")  # JSON, but not an entry
    assert cache.read("sha256/a.json") is None
    (tmp_path / "sha256" / "a.json").write_bytes(b"\xff\xfe")  # not text
    assert cache.read("sha256/a.json") is None
    assert CacheFiles(None).read("sha256/a.json") is None  # no cache dir at all
    CacheFiles(None).write("sha256/a.json", {})


def test_an_unwritable_cache_dir_keeps_nothing_and_raises_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a regular file, so no folder can be made under it (even by root)")
    cache = CacheFiles(tmp_path / "file" / "kimik3")
    cache.write("sha256/a.json", {"sha256": "ab"})
    assert cache.read("sha256/a.json") is None


def _plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_root: Path) -> tuple[int, str]:
    """`kimik3 plan` through the CLI on fakes, with the real state dir and cache dir adapters."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "src.tar.gz").write_bytes(b"source")
    (work / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    (work / "profile.yaml").write_text(FAKE_PROFILE)
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))

    def real_ports(state_dir: Path, *_: object, **__: object):  # the CLI's adapters, faked
        ports.state, ports.cache = StateFiles(state_dir), CacheFiles(cache_dir())
        return ports

    monkeypatch.setattr(adapters, "real_ports", real_ports)
    monkeypatch.setenv("KIMIK3_CACHE_DIR", str(cache_root))
    result = CliRunner().invoke(
        cli.main,
        [
            "--state-dir",
            str(tmp_path / "state"),
            "--dockerfile",
            str(work / "Dockerfile.llamacpp"),
            "plan",
            str(work / "profile.yaml"),
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_plan_never_creates_the_state_dir_and_caches_in_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _plan(tmp_path, monkeypatch, tmp_path / "cache")
    assert first[0] == 0, first[1]
    assert not (tmp_path / "state").exists()
    assert len(list((tmp_path / "cache" / "profiles").glob("*.json"))) == 1
    (archive_memo,) = (tmp_path / "cache" / "sha256").glob("*.json")
    assert json.loads(archive_memo.read_text())["path"] == str(tmp_path / "work" / "src.tar.gz")
    assert _plan(tmp_path, monkeypatch, tmp_path / "cache") == first  # from the caches: the same plan
    assert not (tmp_path / "state").exists()


def test_an_unwritable_cache_dir_only_costs_speed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = _plan(tmp_path, monkeypatch, tmp_path / "cache")
    (tmp_path / "file").write_text("not a folder")
    for _ in range(2):  # nothing kept: both runs validate and hash again
        assert _plan(tmp_path, monkeypatch, tmp_path / "file" / "kimik3") == cached
    assert "Traceback" not in cached[1] and not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("cache_dir", "said"),
    [("weights.gguf", "is not a directory (resolved"), ("weights.gguf/hub", "weights.gguf is not a directory")],
)
def test_a_model_cache_dir_that_is_a_file_is_refused_at_plan_naming_the_field(
    tmp_path: Path, cache_dir: str, said: str
) -> None:
    """Was: planned a download, then apply failed at mkdir (exit 8). Now exit 2 naming model.cache_dir, from the
    observation every command makes, before any step."""
    from support.fakes import MemoryState

    from kimik3_reconciler.errors import InputError
    from kimik3_reconciler.model.profile_source import parse_profile
    from kimik3_reconciler.observe.local_inputs import collect_inputs

    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "weights.gguf").write_bytes(b"GGUF")
    text = FAKE_PROFILE.replace("quant: UD-Q2_K_XL}", f"quant: UD-Q2_K_XL, cache_dir: {cache_dir}}}")
    profile = parse_profile(text, "k3.yaml").profile
    with pytest.raises(InputError) as refused:
        collect_inputs(profile, tmp_path, tmp_path / "Dockerfile", MemoryState())
    assert "model.cache_dir" in str(refused.value) and said in str(refused.value)
    assert refused.value.exit_code == 2
    ok = parse_profile(FAKE_PROFILE.replace("quant: UD-Q2_K_XL}", "quant: UD-Q2_K_XL, cache_dir: new/hub}"), "k3.yaml")
    collect_inputs(ok.profile, tmp_path, tmp_path / "Dockerfile", MemoryState())  # a folder still to create is fine
