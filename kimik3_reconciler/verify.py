"""`kimik3 verify`: check the profile's running llama-server end to end, one timed CheckResult per check.

Checks, in order: health, models, text, tool_call, vision (fork + mmproj only, else skipped),
two_turn. Random demo weights answer nonsense, so each check tests the server's plumbing (a
choice comes back, tool-call arguments parse, the whole assistant message is accepted back),
never the quality of an answer. The API key is read at the last moment and never reported.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimik3_reconciler.engine import Engine
from kimik3_reconciler.errors import PermanentError, StepError, VerifyFailed
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_source import LoadedProfile
from kimik3_reconciler.planning import render_desired
from kimik3_reconciler.planning.container_step import plan_container
from kimik3_reconciler.ports import ChatPort, Ports

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
MAINLINE_SKIP = "skipped: mainline build has no vision"
NO_TOOL_CALL = "answered without a tool call (random weights)"


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "seconds": self.seconds}


@dataclass
class VerifyReport:
    profile: str
    checks: list[CheckResult] = field(default_factory=list)
    tool_call_parse_failures: int = 0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "ok": self.ok, "tool_call_parse_failures": self.tool_call_parse_failures,
                "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True)
class _Server:
    """Where the running container answers; the key stays out of repr (and so out of any traceback)."""

    base_url: str
    api_key: str | None = field(repr=False)


def verify(engine: Engine, loaded: LoadedProfile) -> VerifyReport:
    """Run every check against the profile's running container; refuse when it is not serving."""
    server, chat = _serving(engine, loaded), engine.ports.chat
    if chat is None:
        raise PermanentError("verify needs a chat port: none is wired into these ports")
    report = VerifyReport(profile=loaded.profile.name)
    checks: list[tuple[str, Callable[[], tuple[bool, str]]]] = [
        ("health", lambda: _health(engine.ports, server)),
        ("models", lambda: _models(chat, server, loaded.profile.name)),
        ("text", lambda: _text(chat, server)),
        ("tool_call", lambda: _tool_call(chat, server, report)),
        ("vision", lambda: _vision(chat, server, loaded.profile)),
        ("two_turn", lambda: _two_turn(chat, server)),
    ]
    clock = engine.ports.clock
    for name, check in checks:
        started = clock.monotonic()
        try:
            ok, detail = check()
        except StepError as exc:  # adapters translate SDK errors; one failed check does not stop the rest
            ok, detail = False, str(exc)
        report.checks.append(CheckResult(name, ok, detail, round(clock.monotonic() - started, 3)))
    return report


def _serving(engine: Engine, loaded: LoadedProfile) -> _Server:
    observed = engine.observe(loaded)
    container = observed.container
    if container is None or not container.serving:
        state = "absent" if container is None else f"{container.state}, health {container.health}"
        raise PermanentError(f"{loaded.profile.name} is not serving ({state}); run `kimik3 apply` first")
    _require_current(loaded, observed)
    # The container's own launch inputs say where it listens (it may predate an edit of the profile).
    port = container.inputs.get("serve.port", loaded.profile.serve.port)
    base_url = f"http://{_probe(container.inputs)}:{port}"
    key = None
    if observed.inputs.api_key_file:
        # Read at the last moment, held only for the requests, never logged.
        lines = Path(observed.inputs.api_key_file).read_text().splitlines()
        key = next((ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")), None)
    return _Server(base_url, key)


def _require_current(loaded: LoadedProfile, observed: Observed) -> None:
    """The running container must be this profile's current launch: checks passing against another quant
    or image would vouch for a deployment the profile does not describe. The container planner decides,
    so verify and plan never disagree on "current"."""
    if observed.model.listing_error:  # no manifest here and the hub is down: the shard's name (part of the
        return                        # launch) is unknown, so "current" cannot be judged; the checks still run
    (step,) = plan_container(render_desired(loaded.profile, observed), observed)
    if step.action in (Action.CREATE, Action.REPLACE):
        moved = "; ".join(str(d) for d in step.diff) or step.reason
        raise VerifyFailed(f"{loaded.profile.name}: the running container is not this profile's current deployment "
                           f"({loaded.source}): {moved}; run `kimik3 apply {loaded.source}`")


def _probe(inputs: dict[str, object]) -> str:
    bind = str(inputs.get("host.bind", "127.0.0.1"))
    if bind in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{bind}]" if ":" in bind else bind


# --- the checks: each returns (ok, detail) ----------------------------------------------------


def _health(ports: Ports, server: _Server) -> tuple[bool, str]:
    status = ports.http.health(f"{server.base_url}/health")
    return status == "ok", f"/health: {status}"


def _models(chat: ChatPort, server: _Server, name: str) -> tuple[bool, str]:
    entries = chat.models(server.base_url, server.api_key).get("data") or []
    # llama-server's --alias is the profile name; `id` is the smallest alias, so look at both.
    names = sorted({str(e.get("id")) for e in entries} | {str(a) for e in entries for a in e.get("aliases") or ()})
    if name in names:
        return True, f"serves {name!r}"
    return False, f"{name!r} is not among the served names {names}"


def _text(chat: ChatPort, server: _Server) -> tuple[bool, str]:
    reply = chat.chat(server.base_url, server.api_key, [{"role": "user", "content": "Say hello."}])
    return _answered(reply), _describe(reply)


def _tool_call(chat: ChatPort, server: _Server, report: VerifyReport) -> tuple[bool, str]:
    # Seed 001: K3 now and then emits a tool call its parser does not expect; validate, retry once.
    messages = [{"role": "user", "content": "What is the weather in Oslo? Use the get_weather tool."}]
    unparsed: list[str] = []
    for _attempt in (1, 2):
        reply = chat.chat(server.base_url, server.api_key, messages, tools=[WEATHER_TOOL], max_tokens=64)
        calls = reply.get("message", {}).get("tool_calls") or []
        broken = [c for c in calls if not _parses(c)]
        if not broken:
            retried = f" (retried after a parse failure: {unparsed[0]})" if unparsed else ""
            if not calls:
                return _answered(reply), f"{NO_TOOL_CALL}: {_describe(reply)}{retried}"
            return True, "; ".join(_call_text(c) for c in calls) + retried
        report.tool_call_parse_failures += 1
        unparsed.append(_call_text(broken[0]))
    return False, f"tool call arguments did not parse as JSON, twice: {'; '.join(unparsed)}"


def _vision(chat: ChatPort, server: _Server, profile: Profile) -> tuple[bool, str]:
    if not profile.vision:  # reference §6: the projector is only launched on a fork build
        return True, MAINLINE_SKIP
    image = "data:image/png;base64," + base64.b64encode(solid_png((200, 30, 30))).decode()
    content = [{"type": "text", "text": "What colour is this image?"},
               {"type": "image_url", "image_url": {"url": image}}]
    reply = chat.chat(server.base_url, server.api_key, [{"role": "user", "content": content}])
    return _answered(reply), _describe(reply)


def _two_turn(chat: ChatPort, server: _Server) -> tuple[bool, str]:
    # Seed 001: K3 keeps its thinking across turns, so the WHOLE assistant message goes back.
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    first = chat.chat(server.base_url, server.api_key, messages, tools=[WEATHER_TOOL])
    assistant = dict(first.get("message") or {})
    if not assistant:
        return False, "turn 1 returned no message"
    messages.append(assistant)
    calls = assistant.get("tool_calls") or []
    for call in calls:  # a tool call is answered before the conversation goes on
        messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": '{"weather": "sunny"}'})
    if not calls:
        messages.append({"role": "user", "content": "And tomorrow?"})
    second = chat.chat(server.base_url, server.api_key, messages, tools=[WEATHER_TOOL])
    sent = [k for k in ("content", "reasoning_content", "tool_calls") if assistant.get(k) is not None]
    then = f"{len(calls)} tool result(s)" if calls else "a user turn"
    return _answered(second), f"sent back {', '.join(sent) or 'an empty message'} + {then}; turn 2: {_describe(second)}"


# --- helpers ----------------------------------------------------------------------------------


def _answered(reply: dict[str, Any]) -> bool:
    """A choice came back: text, thinking or a tool call (random weights: the words mean nothing)."""
    message = reply.get("message") or {}
    return any(message.get(k) is not None for k in ("content", "reasoning_content", "tool_calls"))


def _describe(reply: dict[str, Any], width: int = 60) -> str:
    message = reply.get("message") or {}
    parts = [f"{k}={_excerpt(message[k], width)}"
             for k in ("content", "reasoning_content") if message.get(k) is not None]
    parts += [_call_text(c) for c in message.get("tool_calls") or []]
    return f"{', '.join(parts) or 'no message'} (finish: {reply.get('finish_reason')})"


def _excerpt(text: object, width: int) -> str:
    shown = repr(text)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def _parses(call: dict[str, Any]) -> bool:
    try:
        json.loads((call.get("function") or {}).get("arguments") or "")
    except (TypeError, ValueError):
        return False
    return True


def _call_text(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    return f"{function.get('name')}({_excerpt(function.get('arguments'), 60)})"


def solid_png(rgb: tuple[int, int, int], size: int = 64) -> bytes:
    """A size×size PNG of one colour (8-bit RGB, no filter), built with zlib and struct only."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = (b"\x00" + bytes(rgb) * size) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
