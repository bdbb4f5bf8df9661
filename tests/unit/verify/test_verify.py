"""`kimik3 verify` on in-memory fakes: real weights are judged (a wrong answer fails), random weights are
"not checkable", tool-call parse failures are retried a bounded number of times and counted, the two-turn
message goes back whole, and a server that dies during a check is named with its fix.
(The same scripts against a real HTTP server behind the real openai client: test_verify_stub_server.py.)"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeChat, FakeHub, fake_ports, gguf_bytes

from kimik3_reconciler.errors import PermanentError, TransientError
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.weights import RANDOM_WEIGHTS, WEIGHTS_KEY
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter
from kimik3_reconciler.verify import MAINLINE_SKIP, NOT_CHECKABLE, Status, solid_png, verify
from kimik3_reconciler.verify.checks import TOOL_CALL_ATTEMPTS

REV, PROFILE = FAKE_REVISION, FAKE_PROFILE
FORK = PROFILE.replace("quant: UD-Q2_K_XL}", "quant: UD-Q2_K_XL, mmproj: mmproj-F16.gguf}").replace(
    "source: mainline", "source: fork"
)
SHARD = "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf"
CHECKS = ["health", "models", "text", "tool_call", "vision", "two_turn"]
GOOD_ARGS, BAD_ARGS = '{"city": "Oslo"}', '{"city": Oslo'
CRASH_LOG = (Path(__file__).parents[2] / "fixtures" / "server-logs" / "cuda-oom-first-request.log").read_text()


REAL = gguf_bytes({"general.architecture": "kimi-k3", "general.name": "Kimi-K3"})
RANDOM = gguf_bytes({"general.architecture": "kimi-k3", WEIGHTS_KEY: RANDOM_WEIGHTS})


def world_with(tmp_path: Path, shard: bytes):
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, _ = fake_ports(FakeHub("org/k3", REV, {SHARD: shard, "mmproj-F16.gguf": b"projector"}, tmp_path / "hub"))
    orchestrator = Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    return orchestrator, ports.chat, tmp_path


@pytest.fixture
def world(tmp_path: Path):
    return world_with(tmp_path, REAL)


@pytest.fixture
def demo(tmp_path: Path):
    return world_with(tmp_path, RANDOM)


def serving(orchestrator: Orchestrator, text: str = PROFILE):
    loaded = parse_profile(text, "test.yaml")
    orchestrator.apply(loaded)
    return loaded


def check(report, name: str):
    return next(c for c in report.checks if c.name == name)


def call(arguments: str = GOOD_ARGS, name: str = "get_weather", call_id: str = "call_1") -> dict:
    return FakeChat.tool_call(arguments, name=name, call_id=call_id)


PONG = FakeChat.reply("pong")
CALLS = FakeChat.reply(None, reasoning="The user wants Oslo's weather: call the tool.", tool_calls=[call()])
SUNNY = FakeChat.reply("It is sunny in Oslo.")


# --- real weights: the answers are judged -------------------------------------------------------


def test_a_real_model_that_answers_right_passes_every_check(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [PONG, CALLS, SUNNY]
    report = verify(orchestrator, loaded)
    assert [c.name for c in report.checks] == CHECKS
    assert [c.status for c in report.checks] == [Status.OK] * 4 + [Status.SKIPPED, Status.OK], report.to_json()
    assert report.ok and not report.weights.random and "no kimik3.weights key" in report.weights.source
    assert check(report, "tool_call").detail == f"get_weather({GOOD_ARGS!r})"
    assert check(report, "vision").detail == MAINLINE_SKIP
    assert all(r["thinking_effort"] == "low" and r["max_tokens"] == 1024 for r in chat.requests)
    assert chat.requests[1]["tools"][0]["function"]["name"] == "get_weather"
    data = report.to_json()
    assert data["ok"] is True and [c["status"] for c in data["checks"]][:4] == ["ok"] * 4
    assert data["tool_calls"] == {"attempts": 1, "parse_failures": 0, "retries": 0}


def test_a_real_model_that_never_calls_the_tool_fails(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [PONG, FakeChat.reply("I cannot check the weather.")]
    report = verify(orchestrator, loaded)
    tool = check(report, "tool_call")
    assert tool.status is Status.FAILED and tool.detail.startswith("answered without calling get_weather")
    assert check(report, "two_turn").detail == "turn 1 made no tool call to answer (see tool_call)"
    assert not report.ok and report.failure_text() == "verify failed (tool_call, two_turn) for k3-test"
    assert report.tool_calls.attempts == 1  # no call is not a parse failure: not retried


def test_a_real_model_that_calls_the_wrong_tool_or_city_fails(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [PONG, FakeChat.reply(None, tool_calls=[call('{"zone": "CET"}', name="get_time")])]
    assert check(verify(orchestrator, loaded), "tool_call").detail.startswith("called get_time(")
    chat.replies = [PONG, FakeChat.reply(None, tool_calls=[call('{"city": "Bergen"}')])]
    assert check(verify(orchestrator, loaded), "tool_call").detail.endswith(": city is not Oslo")


def test_a_real_model_that_does_not_say_the_word_fails_text(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [FakeChat.reply("ø#2j!")]
    text = check(verify(orchestrator, loaded), "text")
    assert text.status is Status.FAILED and text.detail.startswith("asked for the word 'pong', got content=")


@pytest.mark.parametrize(
    ("answer", "status", "detail"),
    [
        ("Red.", Status.OK, "named red: "),
        ("Blue", Status.FAILED, "named blue for a red image: "),
        ("A square.", Status.FAILED, "named no colour for a red image: "),
    ],
)
def test_vision_judges_the_probe_colour_on_a_fork(world, answer, status, detail):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator, FORK)
    chat.replies = [PONG, CALLS, FakeChat.reply(answer), SUNNY]
    vision = check(verify(orchestrator, loaded), "vision")
    assert vision.status is status and vision.detail.startswith(detail)
    parts = chat.requests[2]["messages"][0]["content"]
    assert next(p["image_url"]["url"] for p in parts if p["type"] == "image_url").startswith("data:image/png;base64,")


# --- tool-call parse failures: bounded retries, counted -----------------------------------------


@pytest.mark.parametrize(
    "broken",
    [
        FakeChat.reply(None, tool_calls=[call(BAD_ARGS)]),
        FakeChat.reply('<|open|>call tool="get_weather"<|sep|>Oslo'),  # markup the parser did not take
        PermanentError(
            "http://127.0.0.1:18999: HTTP 500: The model produced output that does not match the expected "
            "Kimi K3 format"
        ),
    ],
)
def test_an_unparsed_tool_call_is_retried_and_counted(world, broken):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [PONG, broken, CALLS, SUNNY]
    report = verify(orchestrator, loaded)
    tool = check(report, "tool_call")
    assert tool.status is Status.OK and "after 1 parse failure(s): " in tool.detail
    assert report.tool_calls.to_json() == {"attempts": 2, "parse_failures": 1, "retries": 1}
    assert report.to_json()["tool_call_parse_failures"] == 1 and report.to_json()["tool_call_retries"] == 1
    assert report.ok


def test_a_tool_call_that_never_parses_fails_after_the_bounded_attempts(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    bad = FakeChat.reply(None, tool_calls=[call(BAD_ARGS)])
    chat.replies = [PONG] + [bad] * TOOL_CALL_ATTEMPTS
    report = verify(orchestrator, loaded)
    tool = check(report, "tool_call")
    assert tool.status is Status.FAILED and f"did not parse in {TOOL_CALL_ATTEMPTS} attempts" in tool.detail
    assert report.tool_calls.to_json() == {"attempts": 3, "parse_failures": 3, "retries": 2}
    assert [c.name for c in report.checks] == CHECKS  # the other checks still ran


def test_another_server_error_is_not_counted_as_a_parse_failure(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [PONG, PermanentError("http://127.0.0.1:18999: HTTP 400: tools are not supported")]
    report = verify(orchestrator, loaded)
    assert check(report, "tool_call").detail.endswith("HTTP 400: tools are not supported")
    assert report.tool_calls.parse_failures == 0 and report.tool_calls.attempts == 1


# --- two turns: the whole message goes back, and the server keeps it ----------------------------


def test_two_turn_sends_the_whole_assistant_message_back_and_checks_the_prompt(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [PONG, CALLS, SUNNY]
    report = verify(orchestrator, loaded)
    turn2 = chat.requests[-1]["messages"]
    assert turn2[1] == CALLS["message"]  # role, content, reasoning_content and tool_calls, as received
    assert turn2[2] == {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Oslo", "weather": "sunny"}'}
    assert chat.templated == [turn2[:1], turn2]  # turn 1 alone, then the messages of turn 2, rendered first
    two_turn = check(report, "two_turn")
    assert two_turn.status is Status.OK
    assert two_turn.detail.startswith("sent back reasoning_content, tool_calls + 1 tool result(s), all in the prompt")


@pytest.mark.parametrize(
    ("dropped", "lacks"), [({"reasoning_content"}, "reasoning_content"), ({"tool_calls"}, "tool_calls")]
)
def test_two_turn_fails_when_the_server_drops_part_of_the_message(world, dropped, lacks):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies, chat.dropped = [PONG, CALLS, SUNNY], dropped
    two_turn = check(verify(orchestrator, loaded), "two_turn")
    assert two_turn.status is Status.FAILED and two_turn.detail.endswith(
        f"the server's prompt for turn 2 lacks {lacks} (dropped)"
    )


def test_two_turn_fails_when_the_answer_ignores_the_tool_result(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.replies = [PONG, CALLS, FakeChat.reply("I do not know.")]
    two_turn = check(verify(orchestrator, loaded), "two_turn")
    assert two_turn.status is Status.FAILED and "turn 2 did not use the tool result (sunny)" in two_turn.detail


# --- random weights: never "ok" for what the model says -----------------------------------------


def test_random_weights_are_not_checkable_never_ok(demo):
    orchestrator, chat, _ = demo
    report = verify(orchestrator, serving(orchestrator))
    statuses = {c.name: c.status for c in report.checks}
    assert statuses == {
        "health": Status.OK,
        "models": Status.OK,
        "text": Status.NOT_CHECKABLE,
        "tool_call": Status.NOT_CHECKABLE,
        "vision": Status.SKIPPED,
        "two_turn": Status.NOT_CHECKABLE,
    }
    assert report.ok and report.weights.random and f"{WEIGHTS_KEY} = 'random'" in report.weights.source
    for name in ("text", "tool_call", "two_turn"):
        assert check(report, name).detail.startswith(NOT_CHECKABLE) and not check(report, name).ok
    data = report.to_json()
    assert data["not_checkable"] == ["text", "tool_call", "two_turn"] and data["weights"]["random"] is True
    assert {c["name"]: c["ok"] for c in data["checks"]}["tool_call"] is None
    assert all(r["max_tokens"] <= 64 and r["thinking_effort"] is None for r in chat.requests)
    assert chat.templated == []  # the demo's template is not K3's: nothing to judge


def test_random_weights_still_fail_the_plumbing(demo):
    orchestrator, chat, _ = demo
    loaded = serving(orchestrator)
    chat.replies = [FakeChat.reply(None)]
    chat.replies[0]["message"].pop("content")
    text = check(verify(orchestrator, loaded), "text")
    assert text.status is Status.FAILED and text.detail.startswith("no message came back")


def test_a_shard_that_is_not_a_gguf_is_judged_as_a_real_model(tmp_path):
    orchestrator, _, _ = world_with(tmp_path, b"shard-one" * 10)
    report = verify(orchestrator, serving(orchestrator))
    assert not report.weights.random and "GGUF header not readable" in report.weights.source
    assert check(report, "text").status is Status.FAILED  # "fake" is not "pong"


def test_a_header_longer_than_the_first_read_is_read_whole(tmp_path):
    from kimik3_reconciler.engines import engine_for
    from kimik3_reconciler.model.facts import ModelFact
    from kimik3_reconciler.observe.served_weights import FIRST_READ, served_weights

    long_header = gguf_bytes({"tokenizer.chat_template": "x" * (FIRST_READ + 4096), WEIGHTS_KEY: RANDOM_WEIGHTS})
    hub = FakeHub("org/k3", REV, {SHARD: long_header}, tmp_path / "hub")
    (tmp_path / "hub" / "cache" / "UD-Q2_K_XL").mkdir(parents=True)
    (tmp_path / "hub" / "cache" / SHARD).write_bytes(long_header)
    # The fake hub keeps its files under <cache dir>/cache/: the hub's own folder is the cache dir here.
    model = ModelFact(repo="org/k3", revision=REV, quant="UD-Q2_K_XL", cache_dir=str(tmp_path / "hub"))
    assert served_weights(hub, model, SHARD, engine_for("llamacpp").weight_headers).random
    (tmp_path / "hub" / "cache" / SHARD).write_bytes(long_header[: FIRST_READ + 100])  # cut short
    cut = served_weights(hub, model, SHARD, engine_for("llamacpp").weight_headers)
    assert not cut.random and "header is longer than the file" in cut.source


# --- a crash during a check names its cause and fix ---------------------------------------------


class CrashingChat(FakeChat):
    """The server aborts on its first completion, as llama-server does on a CUDA error."""

    def chat(self, request):
        container = next(iter(self.docker.containers.values()))
        container["State"].update(Status="exited", ExitCode=134)
        self.docker.logs = CRASH_LOG
        raise TransientError(f"{request.base_url}: Connection error.")


def test_a_cuda_oom_on_the_first_request_names_the_fix(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    orchestrator.ports.chat = CrashingChat(chat.docker)
    report = verify(orchestrator, loaded)
    text = check(report, "text")
    assert text.status is Status.FAILED and text.detail.startswith("the server crashed during this check: ")
    assert "CUDA error: out of memory on a request after a successful load" in report.crash
    assert "raise serve.fit_target" in report.crash and "serve.ubatch 2048" in report.crash
    assert "[cuda-oom: exited, exit code 134]" in report.crash
    assert [c.detail.startswith("not run: the server crashed") for c in report.checks[3:]] == [True] * 3
    assert "the server crashed: container k3-test crashed with CUDA error: out of memory" in report.failure_text()


# --- the rest of verify ---------------------------------------------------------------------------


def test_the_image_is_a_valid_64x64_png():
    png = solid_png((200, 30, 30))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    pos, chunks = 8, {}
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        assert struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])[0] == zlib.crc32(kind + data)
        chunks[kind], pos = data, pos + 12 + length
    assert struct.unpack(">IIBB", chunks[b"IHDR"][:10]) == (64, 64, 8, 2)
    assert zlib.decompress(chunks[b"IDAT"]) == (b"\x00" + bytes((200, 30, 30)) * 64) * 64


def test_refuses_when_the_container_is_not_serving(world):
    orchestrator, chat, _ = world
    with pytest.raises(PermanentError, match="k3-test is not serving \\(absent\\); run `kimik3 apply` first"):
        verify(orchestrator, parse_profile(PROFILE, "test.yaml"))
    assert chat.requests == []


def test_a_server_error_fails_its_checks_without_stopping_the_others(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.error = TransientError("http://127.0.0.1:18999: Connection error.")
    report = verify(orchestrator, loaded)
    assert [(c.name, c.status) for c in report.checks] == [
        ("health", Status.OK),
        ("models", Status.FAILED),
        ("text", Status.FAILED),
        ("tool_call", Status.FAILED),
        ("vision", Status.SKIPPED),
        ("two_turn", Status.FAILED),
    ]
    assert report.checks[1].detail == "http://127.0.0.1:18999: Connection error."
    assert report.crash is None  # the container still runs: not a crash


def test_a_server_that_does_not_know_the_profile_name_fails_models(world):
    orchestrator, chat, _ = world
    loaded = serving(orchestrator)
    chat.models = lambda base_url, api_key: {"data": [{"id": "k3", "aliases": ["k3", "other"]}]}
    report = verify(orchestrator, loaded)
    assert report.checks[1].detail == "'k3-test' is not among the served names ['k3', 'other']" and not report.ok


def test_the_api_key_goes_to_the_server_and_nowhere_else(world):
    orchestrator, chat, tmp_path = world
    (tmp_path / "api.key").write_text("# the server's key\nsekrit-123\n")
    loaded = serving(orchestrator, PROFILE.replace("parallel: 2}", "parallel: 2, api_key_file: api.key}"))
    chat.replies = [PONG, CALLS, SUNNY]
    report = verify(orchestrator, loaded)
    assert report.ok and {r["api_key"] for r in chat.requests} == {"sekrit-123"}
    assert "sekrit-123" not in json.dumps(report.to_json()) and "sekrit-123" not in repr(report)
