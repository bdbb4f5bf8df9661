"""`kimik3 verify` on in-memory fakes: the checks, tool-call retries, the two-turn message, vision."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeChat, FakeHub, fake_ports

from kimik3_reconciler.engine import Engine
from kimik3_reconciler.errors import PermanentError, TransientError
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.steps.report import NullReporter
from kimik3_reconciler.verify import MAINLINE_SKIP, NO_TOOL_CALL, solid_png, verify

REV, PROFILE = FAKE_REVISION, FAKE_PROFILE
FORK = PROFILE.replace("quant: UD-Q2_K_XL}", "quant: UD-Q2_K_XL, mmproj: mmproj-F16.gguf}").replace(
    "source: mainline", "source: fork")
FILES = {
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard-one" * 10,
    "mmproj-F16.gguf": b"projector",
}
CHECKS = ["health", "models", "text", "tool_call", "vision", "two_turn"]
GOOD_ARGS, BAD_ARGS = '{"city": "Oslo"}', '{"city": Oslo'


@pytest.fixture
def world(tmp_path: Path):
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, _ = fake_ports(FakeHub("org/k3", REV, FILES, tmp_path / "hub"))
    engine = Engine(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    return engine, ports.chat, tmp_path


def serving(engine: Engine, text: str = PROFILE):
    loaded = parse_profile(text, "test.yaml")
    engine.apply(loaded)
    return loaded


def test_every_check_passes_on_a_serving_container(world):
    engine, chat, _ = world
    report = verify(engine, serving(engine))
    assert [c.name for c in report.checks] == CHECKS
    assert report.ok and report.tool_call_parse_failures == 0
    checks = {c.name: c for c in report.checks}
    assert checks["health"].detail == "/health: ok"
    assert checks["models"].detail == "serves 'k3-test'"
    assert checks["tool_call"].detail.startswith(NO_TOOL_CALL)
    assert checks["vision"].detail == MAINLINE_SKIP
    assert [r["base_url"] for r in chat.requests] == ["http://127.0.0.1:18999"] * 4  # text, tool_call, 2 turns
    assert chat.requests[1]["tools"][0]["function"]["name"] == "get_weather"
    data = report.to_json()
    assert data["ok"] is True and [c["name"] for c in data["checks"]] == CHECKS
    assert all(isinstance(c["seconds"], float) for c in data["checks"])


def test_a_tool_call_that_does_not_parse_is_retried_once(world):
    engine, chat, _ = world
    loaded = serving(engine)
    chat.replies = [FakeChat.reply(), FakeChat.reply(None, tool_calls=[FakeChat.tool_call(BAD_ARGS)]),
                    FakeChat.reply(None, tool_calls=[FakeChat.tool_call(GOOD_ARGS)])]
    report = verify(engine, loaded)
    tool = next(c for c in report.checks if c.name == "tool_call")
    assert tool.ok and f"retried after a parse failure: get_weather({BAD_ARGS!r})" in tool.detail
    assert report.tool_call_parse_failures == 1 and report.ok
    asked = [r for r in chat.requests if r["messages"][0]["content"].startswith("What is the weather in Oslo? Use")]
    assert len(asked) == 2


def test_a_parse_failure_stays_reported_when_the_retry_answers_without_a_call(world):
    engine, chat, _ = world
    loaded = serving(engine)
    chat.replies = [FakeChat.reply(), FakeChat.reply(None, tool_calls=[FakeChat.tool_call(BAD_ARGS)]),
                    FakeChat.reply("no tool")]
    report = verify(engine, loaded)
    tool = next(c for c in report.checks if c.name == "tool_call")
    assert tool.ok and tool.detail.startswith(NO_TOOL_CALL) and "retried after a parse failure" in tool.detail
    assert report.tool_call_parse_failures == 1


def test_a_tool_call_that_fails_twice_is_reported_and_counted(world):
    engine, chat, _ = world
    loaded = serving(engine)
    bad = FakeChat.reply(None, tool_calls=[FakeChat.tool_call(BAD_ARGS)])
    chat.replies = [FakeChat.reply(), bad, bad]
    report = verify(engine, loaded)
    tool = next(c for c in report.checks if c.name == "tool_call")
    assert not tool.ok and "did not parse as JSON, twice" in tool.detail
    assert report.tool_call_parse_failures == 2 and not report.ok
    assert [c.name for c in report.checks] == CHECKS  # the other checks still ran
    assert report.to_json()["tool_call_parse_failures"] == 2


def test_two_turn_sends_the_whole_assistant_message_back(world):
    engine, chat, _ = world
    loaded = serving(engine)
    first = FakeChat.reply(None, reasoning="The user wants Oslo's weather.",
                           tool_calls=[FakeChat.tool_call(GOOD_ARGS, call_id="call_7")])
    chat.replies = [FakeChat.reply(), FakeChat.reply(), first, FakeChat.reply("Sunny.")]
    report = verify(engine, loaded)
    turn2 = chat.requests[-1]["messages"]
    assert turn2[1] == first["message"]  # role, content, reasoning_content and tool_calls, as received
    assert turn2[2] == {"role": "tool", "tool_call_id": "call_7", "content": '{"weather": "sunny"}'}
    two_turn = next(c for c in report.checks if c.name == "two_turn")
    assert two_turn.ok and "sent back reasoning_content, tool_calls + 1 tool result(s)" in two_turn.detail


def test_two_turn_without_a_tool_call_keeps_the_thinking_and_asks_again(world):
    engine, chat, _ = world
    loaded = serving(engine)
    first = FakeChat.reply("Probably rain.", reasoning="No tool needed.")
    chat.replies = [FakeChat.reply(), FakeChat.reply(), first]
    report = verify(engine, loaded)
    turn2 = chat.requests[-1]["messages"]
    assert turn2[1] == {"role": "assistant", "content": "Probably rain.", "reasoning_content": "No tool needed."}
    assert turn2[2]["role"] == "user"
    assert "sent back content, reasoning_content + a user turn" in report.checks[-1].detail


def test_vision_is_skipped_on_mainline(world):
    engine, chat, _ = world
    report = verify(engine, serving(engine))
    assert next(c for c in report.checks if c.name == "vision").detail == MAINLINE_SKIP
    assert not any(isinstance(m["content"], list) for r in chat.requests for m in r["messages"])


def test_vision_sends_an_image_on_a_fork_with_a_projector(world):
    engine, chat, _ = world
    loaded = serving(engine, FORK)
    chat.replies = [FakeChat.reply(), FakeChat.reply(), FakeChat.reply("red", reasoning="A red square.")]
    report = verify(engine, loaded)
    vision = next(c for c in report.checks if c.name == "vision")
    assert vision.ok and "content='red'" in vision.detail and "reasoning_content='A red square.'" in vision.detail
    parts = chat.requests[2]["messages"][0]["content"]
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    assert url.startswith("data:image/png;base64,")


def test_the_image_is_a_valid_64x64_png():
    png = solid_png((200, 30, 30))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    pos, chunks = 8, {}
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + data)
        chunks[kind], pos = data, pos + 12 + length
    assert struct.unpack(">IIBB", chunks[b"IHDR"][:10]) == (64, 64, 8, 2)
    assert zlib.decompress(chunks[b"IDAT"]) == (b"\x00" + bytes((200, 30, 30)) * 64) * 64


def test_refuses_when_the_container_is_not_serving(world):
    engine, chat, _ = world
    with pytest.raises(PermanentError, match="k3-test is not serving \\(absent\\); run `kimik3 apply` first"):
        verify(engine, parse_profile(PROFILE, "test.yaml"))
    assert chat.requests == []


def test_a_server_error_fails_its_checks_without_stopping_the_others(world):
    engine, chat, _ = world
    loaded = serving(engine)
    chat.error = TransientError("http://127.0.0.1:18999: Connection error.")
    report = verify(engine, loaded)
    assert [(c.name, c.ok) for c in report.checks] == [
        ("health", True), ("models", False), ("text", False), ("tool_call", False), ("vision", True),
        ("two_turn", False)]
    assert report.checks[1].detail == "http://127.0.0.1:18999: Connection error."


def test_a_server_that_does_not_know_the_profile_name_fails_models(world):
    engine, chat, _ = world
    loaded = serving(engine)
    chat.models = lambda base_url, api_key: {"data": [{"id": "k3", "aliases": ["k3", "other"]}]}
    report = verify(engine, loaded)
    assert report.checks[1].detail == "'k3-test' is not among the served names ['k3', 'other']" and not report.ok


def test_the_api_key_goes_to_the_server_and_nowhere_else(world):
    engine, chat, tmp_path = world
    (tmp_path / "api.key").write_text("# the server's key\nsekrit-123\n")
    loaded = serving(engine, PROFILE.replace("parallel: 2}", "parallel: 2, api_key_file: api.key}"))
    report = verify(engine, loaded)
    assert report.ok and {r["api_key"] for r in chat.requests} == {"sekrit-123"}
    assert "sekrit-123" not in json.dumps(report.to_json()) and "sekrit-123" not in repr(report)
