"""The warm step's API key (cli/fleet_warm.py `server_key`): read from the host profile's serve.api_key_file as
verify reads it (the first key llama-server holds), never written to the warm record or a message; a key the
controller cannot read or send makes the host rejoin cold with the field named, not a silent run of 401s. The
requests themselves carrying the key are checked against a real llama-server (tests/integration/
test_slot_warm_docker.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.shipped import pinned_text

from kimik3_reconciler.adapters.slot_cache import SlotCacheError
from kimik3_reconciler.cli.fleet_warm import save_before_swap, server_key, warm_after_swap
from kimik3_reconciler.fleet.warm import warm_record
from kimik3_reconciler.model.profile_source import parse_profile

ROOT = Path(__file__).resolve().parents[3]
KEY = "k3-warm-secret-0123456789"
NOWHERE = "http://127.0.0.1:9"  # nothing listens: a request made there fails at once


def _profile(key_file: Path | None):  # noqa: ANN202 - Profile
    profile = parse_profile(pinned_text(ROOT / "profiles" / "demo-cpu.yaml"), "demo-cpu.yaml").profile
    serve = {"slot_save": True, "api_key_file": str(key_file) if key_file else None}
    return profile.model_copy(update={"serve": profile.serve.model_copy(update=serve)})


def _rolled(tmp_path: Path, profile) -> Path:  # noqa: ANN001 - Profile
    """The rollout record's path, with the host's warm record as after an earlier rollout: its slots are kept."""
    record = tmp_path / "fleet" / "f" / "rollout.json"
    (record.parent / "warm").mkdir(parents=True)
    (record.parent / "warm" / "h.json").write_text(json.dumps(warm_record(profile)))
    return record


def test_no_key_file_sends_no_key() -> None:
    assert server_key(_profile(None)) is None


def test_the_first_key_the_server_holds_is_sent(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(f"# the fleet's key\n\n{KEY}\nsecond-key\n".encode())
    assert server_key(_profile(path)) == KEY


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "is not readable on this controller"),  # the key is on the host only
        (f"{KEY}\r\n".encode(), "holds no key the server can match as sent"),  # CRLF: the server holds "KEY\r"
        (b"\xff\xfe", "holds no key the server can match as sent"),
    ],
)
def test_a_key_that_cannot_be_sent_names_the_field(tmp_path: Path, content: bytes | None, why: str) -> None:
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SlotCacheError) as caught:
        server_key(_profile(path))
    assert str(caught.value).startswith(f"serve.api_key_file: {path}") and why in str(caught.value)
    assert KEY not in str(caught.value)


def test_an_unreadable_key_leaves_the_host_cold_and_says_why(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "absent-key")
    record = _rolled(tmp_path, profile)
    said = save_before_swap(record, "h", NOWHERE, profile, 0)
    # Not the restore plan's connection error: the key is checked before any request.
    assert "slots not saved (serve.api_key_file:" in said and "not readable on this controller" in said, said
    done = warm_after_swap(record, "h", NOWHERE, profile, ({"messages": [{"role": "system", "content": "x"}]},))
    assert done["how"] == "none" and done["prompts"] == 0, done
    assert done["failed"] == [
        f"serve.api_key_file: {tmp_path / 'absent-key'} is not readable on this controller (No such file or directory)"
    ]


def test_the_key_is_never_in_the_warm_record_or_a_message(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"{KEY}\n")
    profile = _profile(key_file)
    record = _rolled(tmp_path, profile)
    said = save_before_swap(record, "h", NOWHERE, profile, 1)
    done = warm_after_swap(record, "h", NOWHERE, profile, ({"messages": [{"role": "system", "content": "x"}]},))
    assert "GET /slots" in said and done["failed"] and done["failed"][0].startswith("prefill:"), (said, done)
    written = (record.parent / "warm" / "h.json").read_text()
    assert KEY not in said + json.dumps(done) + written
