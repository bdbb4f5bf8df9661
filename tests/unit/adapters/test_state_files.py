"""The state directory adapter (real files under tmp_path): atomic records, and artifacts made once, whole."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from kimik3_reconciler.adapters.state_files import StateFiles


def test_an_artifact_appears_whole_and_is_made_once(tmp_path: Path) -> None:
    state = StateFiles(tmp_path)
    calls = []

    def make(staging: Path) -> None:
        calls.append(staging)
        assert not staging.exists() and staging.parent != tmp_path / "gate"  # a private folder beside the key
        staging.write_text("logits")

    made = state.produce("gate/ref.kld", make)
    assert made == tmp_path / "gate" / "ref.kld" and made.read_text() == "logits"
    assert state.produce("gate/ref.kld", make) == made and len(calls) == 1
    assert state.artifact("gate/ref.kld") == made
    assert sorted(p.name for p in made.parent.iterdir()) == [".ref.kld.lock", "ref.kld"]  # no staging left


def test_a_failed_make_leaves_nothing_and_a_killed_one_is_swept(tmp_path: Path) -> None:
    state = StateFiles(tmp_path)

    def fails(staging: Path) -> None:
        staging.mkdir()
        (staging / "half.gguf").write_bytes(b"x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        state.produce("smoke-model", fails)
    assert state.artifact("smoke-model") is None
    leftover = tmp_path / ".smoke-model.abc123.partial"  # what a kill -9 mid-make leaves
    (leftover / "smoke-model").mkdir(parents=True)
    folder = state.produce("smoke-model", lambda staging: (staging.mkdir(), (staging / "m.gguf").write_bytes(b"m")))
    assert (folder / "m.gguf").read_bytes() == b"m" and not leftover.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
    state.discard("smoke-model")
    assert state.artifact("smoke-model") is None


def _produce_slowly(root: str, out: str) -> None:
    def make(staging: Path) -> None:
        with open(out, "a") as log:
            log.write("made\n")
        time.sleep(0.5)
        staging.write_text("once")

    StateFiles(Path(root)).produce("archives/src.tar.gz", make)


def test_two_processes_producing_one_key_make_it_once(tmp_path: Path) -> None:
    log = tmp_path / "made.log"
    procs = [
        multiprocessing.Process(target=_produce_slowly, args=(str(tmp_path / "state"), str(log))) for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    assert log.read_text() == "made\n"
    assert (tmp_path / "state" / "archives" / "src.tar.gz").read_text() == "once"


def test_records_are_written_atomically_and_a_torn_one_reads_as_absent(tmp_path: Path) -> None:
    state = StateFiles(tmp_path)
    state.write("models/x.json", {"a": 1})
    assert state.read("models/x.json") == {"a": 1}
    (tmp_path / "models" / "x.json").write_text('{"a": ')
    assert state.read("models/x.json") is None
    state.delete("models/x.json")
    assert state.read("models/x.json") is None


@pytest.mark.parametrize(
    "key",
    ["../outside.json", "a/../../outside.json", "/tmp/outside.json", "a//b.json", "./a.json", "..", "gate///.json"],
)
def test_a_state_key_never_reaches_outside_the_state_directory(tmp_path: Path, key: str) -> None:
    """Keys are paths under the state dir; one that climbs out (`kimik3 metrics-serve ../..` made one) is refused by
    every operation that changes something, and discard (an rmtree) removes nothing outside; reading one finds no
    record (nothing can be written there), so a key built from an empty field (the exporter's gate key of a
    config without a quant: `gate///.json`) reads as absent instead of failing every scrape."""
    root = tmp_path / "state"
    root.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    state = StateFiles(root)
    for call in (
        lambda: state.write(key, {}),
        lambda: state.delete(key),
        lambda: state.discard(key),
        lambda: state.produce(key, lambda p: p.write_text("x")),
    ):
        with pytest.raises(ValueError, match="state key"):
            call()
    assert state.read(key) is None and state.artifact(key) is None
    assert outside.read_text() == "{}" and root.exists()


def test_metrics_serve_takes_only_a_profile_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from kimik3_reconciler.cli import main

    monkeypatch.setenv("KIMIK3_STATE_DIR", str(tmp_path / "state"))
    result = CliRunner().invoke(main, ["metrics-serve", "../../x"])
    assert result.exit_code == 2 and "not a profile name" in result.output
