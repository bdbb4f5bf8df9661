"""The chat checks of `kimik3 verify`: text, tool call, vision, two turns.

Each check has two halves. Plumbing: the server answers, a tool call's arguments parse, the whole
assistant message goes back. Content: the model said the right thing (it called get_weather for
Oslo, named the red probe's colour, used the tool result). On real weights both are asserted and a
wrong answer FAILS; on random weights (model/weights.py) only the plumbing can fail and the content
is reported "not checkable (random weights)", never "ok". A real model that spends its whole token budget
thinking (finish_reason "length", no content, no tool call) is asked once more with a bigger budget;
if it still only thinks, the check is "inconclusive", which neither passes nor fails verify (and so
never reverts a deployment over a token budget).
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.ports import ChatPort, ChatRequest
from kimik3_reconciler.verify.report import (
    INCONCLUSIVE,
    NOT_CHECKABLE,
    Status,
    ToolCallCounts,
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_PROMPT = "What is the weather in Oslo? Use the get_weather tool."
TOOL_RESULT = '{"city": "Oslo", "weather": "sunny"}'
TEXT_PROMPT = "Reply with exactly one word: pong"
VISION_PROMPT = "What colour is this image? Answer with one word."
PROBE_RGB = (200, 30, 30)  # a solid red square (seed 000 step 6: vision-probe.py's solid-colour probe)
MAINLINE_SKIP = "skipped: mainline build has no vision"
# Seed 001: validate a tool call and retry it; bounded, so a model that never emits a parseable call fails.
TOOL_CALL_ATTEMPTS = 3
# Real weights think before they answer: room for that at low effort (the template's default is max).
REAL_MAX_TOKENS, RANDOM_MAX_TOKENS, THINKING_EFFORT = 1024, 32, "low"
# K3's thinking can use all of REAL_MAX_TOKENS before a word of the answer: one more try with this much.
THINKING_RETRY_MAX_TOKENS = 4096
# llama-server's words when the model's output does not match the chat format's parser (common/chat.cpp)
UNPARSED_OUTPUT = "does not match the expected"
# tool-call markup a lenient parser leaves in `content` when it did not recognise the call's shape
_CALL_MARKUP = ("<|open|>call", "<|open|>tools", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<tool_call>")
CALL_MARKUP = _CALL_MARKUP  # the latency proxy looks for the same signs in live replies (exporter/proxy_observe.py)
# Colour words -> the colour they name. Shades of red count as red (a model may say "crimson" for (200, 30, 30));
# other colours, including red's neighbours (orange, pink, purple, brown), count as themselves: a wrong answer.
_COLOURS = {
    **dict.fromkeys(
        (
            "red",
            "reddish",
            "crimson",
            "scarlet",
            "maroon",
            "vermilion",
            "vermillion",
            "carmine",
            "cardinal",
            "ruby",
            "cherry",
            "burgundy",
            "brick",
        ),
        "red",
    ),
    **dict.fromkeys(("green", "greenish", "lime", "olive", "teal"), "green"),
    **dict.fromkeys(("blue", "bluish", "navy", "azure", "cyan", "turquoise"), "blue"),
    **dict.fromkeys(("yellow", "yellowish", "gold", "golden"), "yellow"),
    **dict.fromkeys(("orange", "orangish", "amber"), "orange"),
    **dict.fromkeys(("purple", "violet", "magenta", "lavender", "lilac"), "purple"),
    **dict.fromkeys(("pink", "pinkish", "rose", "salmon"), "pink"),
    **dict.fromkeys(("brown", "brownish", "tan", "beige"), "brown"),
    "black": "black",
    "white": "white",
    "grey": "grey",
    "gray": "grey",
}


@dataclass(frozen=True)
class Server:
    """Where the running container answers; the key stays out of repr (and so out of any traceback)."""

    base_url: str
    api_key: str | None = field(repr=False)


@dataclass
class Session:
    """What the checks share: the server, whether the weights can be judged, the tool-call counts, and the
    tool-call conversation the two-turn check continues."""

    chat: ChatPort
    server: Server
    profile: Profile
    random_weights: bool
    # The message field the engine puts the reasoning in (engines/base.py: llama-server `reasoning_content`,
    # vLLM `reasoning`): what two_turn sends back and must find in the next prompt.
    reasoning_field: str
    counts: ToolCallCounts = field(default_factory=ToolCallCounts)
    tool_turn: tuple[list[dict[str, Any]], dict[str, Any] | None] | None = None  # (messages, reply)

    def ask(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        if self.random_weights:  # nothing is judged: a few tokens prove the plumbing
            return self._chat(messages, tools, RANDOM_MAX_TOKENS * (2 if tools else 1), None)
        reply = self._chat(messages, tools, REAL_MAX_TOKENS, THINKING_EFFORT)
        # rule: verify-thinking-budget
        # K3 thinks first: a reply cut at max_tokens before any answer is asked once more, with room.
        if thinking_ran_out(reply):
            reply = self._chat(messages, tools, THINKING_RETRY_MAX_TOKENS, THINKING_EFFORT)
        return reply

    def _chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, max_tokens: int, effort: str | None
    ) -> dict[str, Any]:
        """One chat completion from the served model, with `max_tokens` and the thinking `effort` (None: the
        template's own)."""
        server, model = self.server, self.profile.name
        return self.chat.chat(
            ChatRequest(
                server.base_url, server.api_key, messages, tools, max_tokens, thinking_effort=effort, model=model
            )
        )


Verdict = tuple[Status, str]


def thinking_ran_out(reply: dict[str, Any]) -> bool:
    """The model stopped at max_tokens with no answer yet (no content, no tool call): it was still thinking."""
    message = reply.get("message") or {}
    said = str(message.get("content") or "").strip() or message.get("tool_calls")
    return reply.get("finish_reason") == "length" and not said


def inconclusive(reply: dict[str, Any], reasoning: str) -> Verdict:
    """Neither a pass nor a failure: nothing was said to judge, the thinking used all the tokens it got."""
    said = describe(reply, reasoning)
    return Status.INCONCLUSIVE, f"{INCONCLUSIVE.format(tokens=THINKING_RETRY_MAX_TOKENS)}: {said}"


def unjudged(session: Session, reply: dict[str, Any]) -> Verdict | None:
    """The verdict of a one-message check whose content cannot be judged, else None: no message came back
    (the plumbing failed), random weights (content not checkable), or the thinking used every token."""
    if not answered(reply, session.reasoning_field):
        return Status.FAILED, f"no message came back: {describe(reply, session.reasoning_field)}"
    if session.random_weights:
        return Status.NOT_CHECKABLE, f"{NOT_CHECKABLE}: answered {describe(reply, session.reasoning_field)}"
    if thinking_ran_out(reply):
        return inconclusive(reply, session.reasoning_field)
    return None


def text(session: Session) -> Verdict:
    reply = session.ask([{"role": "user", "content": TEXT_PROMPT}])
    if (verdict := unjudged(session, reply)) is not None:
        return verdict
    content = str(reply["message"].get("content") or "")
    # rule: verify-text
    # A real model that cannot say one asked-for word is broken (a bad kernel talks nonsense fluently).
    if "pong" not in content.lower():
        return Status.FAILED, f"asked for the word 'pong', got {describe(reply, session.reasoning_field)}"
    return Status.OK, describe(reply, session.reasoning_field)


def tool_call(session: Session) -> Verdict:
    messages = [{"role": "user", "content": TOOL_PROMPT}]
    reply, unparsed = _ask_for_tool(session, messages)
    session.tool_turn = (messages, reply)
    retried = f" (after {len(unparsed)} parse failure(s): {'; '.join(unparsed)})" if unparsed and reply else ""
    if reply is None:
        why = f"the tool call did not parse in {TOOL_CALL_ATTEMPTS} attempts: {'; '.join(unparsed)}"
        return (Status.NOT_CHECKABLE, f"{NOT_CHECKABLE}: {why}") if session.random_weights else (Status.FAILED, why)
    if session.random_weights:
        return Status.NOT_CHECKABLE, f"{NOT_CHECKABLE}: answered {describe(reply, session.reasoning_field)}{retried}"
    if thinking_ran_out(reply):
        return inconclusive(reply, session.reasoning_field)
    # rule: verify-tool-call
    # Seed 000 step 6 verifies tool calls end to end: a real model asked to use get_weather must call it.
    problem = _wrong_call(reply, session.reasoning_field)
    if problem:
        return Status.FAILED, f"{problem}{retried}"
    return Status.OK, "; ".join(call_text(c) for c in reply["message"]["tool_calls"]) + retried


def vision(session: Session) -> Verdict:
    if not engine_for(session.profile.engine).vision_probe:
        # The probe is llama.cpp's (--mmproj on a fork build); a checkpoint engine serves Kimi-K3's vision from the
        # checkpoint itself, which no check here sends an image to yet (ServingEngine.vision_probe).
        return Status.SKIPPED, f"skipped: engine {session.profile.engine}: the vision probe is not sent yet"
    if not session.profile.vision:  # reference §6: the projector is only launched on a fork build
        return Status.SKIPPED, MAINLINE_SKIP
    image = "data:image/png;base64," + base64.b64encode(solid_png(PROBE_RGB)).decode()
    content = [{"type": "text", "text": VISION_PROMPT}, {"type": "image_url", "image_url": {"url": image}}]
    reply = session.ask([{"role": "user", "content": content}])
    if (verdict := unjudged(session, reply)) is not None:
        return verdict
    named = colours_named(str(reply["message"].get("content") or ""))
    # rule: verify-vision
    # Seed 000 step 6: vision is verified with a solid-colour probe; "it answered" proves nothing. A shade of
    # red passes; another colour named beside red ("red or orange") does not: the image has one colour.
    if named != {"red"}:
        said = ", ".join(sorted(named)) or "no colour"
        return Status.FAILED, f"named {said} for a red image: {describe(reply, session.reasoning_field)}"
    return Status.OK, f"named red: {describe(reply, session.reasoning_field)}"


def two_turn(session: Session) -> Verdict:
    """Continue the tool-call conversation: the WHOLE assistant message back (seed 001: K3 keeps its thinking
    across turns), then the tool's result (or a user turn when no call came)."""
    if session.tool_turn is None or session.tool_turn[1] is None:
        why = "turn 1 (the tool_call check) gave no message to send back"
        return (Status.NOT_CHECKABLE, f"{NOT_CHECKABLE}: {why}") if session.random_weights else (Status.FAILED, why)
    first_messages, first = session.tool_turn
    assistant = dict(first.get("message") or {})
    messages = [*first_messages, assistant]
    calls = assistant.get("tool_calls") or []
    for call in calls:  # a tool call is answered before the conversation goes on
        messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": TOOL_RESULT})
    if not calls:
        messages.append({"role": "user", "content": "And tomorrow?"})
    sent = [k for k in ("content", session.reasoning_field, "tool_calls") if assistant.get(k) is not None]
    then = f"{len(calls)} tool result(s)" if calls else "a user turn"
    shown = f"sent back {', '.join(sent) or 'an empty message'} + {then}"
    if session.random_weights:
        second = session.ask(messages, tools=[WEATHER_TOOL])
        if not answered(second, session.reasoning_field):
            return Status.FAILED, f"{shown}; turn 2: no message came back"
        return Status.NOT_CHECKABLE, f"{NOT_CHECKABLE}: {shown}; turn 2: {describe(second, session.reasoning_field)}"
    if not calls:
        if thinking_ran_out(first):
            return Status.INCONCLUSIVE, "turn 1 (tool_call) was inconclusive: no tool call to answer yet"
        return Status.FAILED, "turn 1 made no tool call to answer (see tool_call)"

    # rule: verify-two-turn
    # Seed 001: clients send back the whole assistant message, reasoning and tool_calls included;
    # the server must put them back into the prompt, or K3 loses its thinking between turns.
    def render(sent: list[dict[str, Any]]) -> str:
        server = session.server
        return session.chat.apply_template(
            ChatRequest(server.base_url, server.api_key, sent, [WEATHER_TOOL], model=session.profile.name)
        )

    dropped = _dropped(render(first_messages), render(messages), assistant, session.reasoning_field)
    if dropped:
        return Status.FAILED, f"{shown}; the server's prompt for turn 2 lacks {', '.join(dropped)} (dropped)"
    second = session.ask(messages, tools=[WEATHER_TOOL])
    if thinking_ran_out(second):
        return inconclusive(second, session.reasoning_field)
    content = str((second.get("message") or {}).get("content") or "").lower()
    if "sun" not in content:
        return (
            Status.FAILED,
            f"{shown}; turn 2 did not use the tool result (sunny): {describe(second, session.reasoning_field)}",
        )
    return Status.OK, f"{shown}, all in the prompt; turn 2: {describe(second, session.reasoning_field)}"


# --- tool calls --------------------------------------------------------------------------------


def _ask_for_tool(session: Session, messages: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    """The first reply whose tool calls parse, or None after TOOL_CALL_ATTEMPTS; the parse failures seen."""
    unparsed: list[str] = []
    # rule: tool-call-retry
    # Seed 001: an unexpected tool-call shape now and then is K3's, not a broken deployment: retry it, but
    # boundedly (a model that never emits a parseable call fails), and count it for the monitor.
    for attempt in range(TOOL_CALL_ATTEMPTS):
        session.counts.attempts += 1
        session.counts.retries += 1 if attempt else 0
        try:
            reply = session.ask(messages, tools=[WEATHER_TOOL])
        except PermanentError as exc:
            if UNPARSED_OUTPUT not in str(exc):  # the server failed otherwise: not a tool-call shape
                raise
            problem = f"the server's parser refused the output ({exc})"
        else:
            problem = unparsed_call(reply)
            if problem is None:
                return reply, unparsed
        session.counts.parse_failures += 1
        unparsed.append(problem)
    return None, unparsed


def unparsed_call(reply: dict[str, Any]) -> str | None:
    """Why the reply's tool call did not parse, or None: arguments that are not a JSON object, or tool-call
    markup left in the content by a parser that did not recognise its shape."""
    message = reply.get("message") or {}
    for call in message.get("tool_calls") or []:
        if not isinstance(arguments(call), dict):
            return f"{call_text(call)}: arguments are not a JSON object"
    content = str(message.get("content") or "")
    leaked = next((m for m in _CALL_MARKUP if m in content), None)
    if leaked:
        return f"tool-call markup {leaked!r} left in the content, unparsed: {excerpt(content, 60)}"
    return None


def _wrong_call(reply: dict[str, Any], reasoning: str) -> str | None:
    calls = (reply.get("message") or {}).get("tool_calls") or []
    if not calls:
        return f"answered without calling get_weather: {describe(reply, reasoning)}"
    names = [(c.get("function") or {}).get("name") for c in calls]
    if "get_weather" not in names:
        return f"called {', '.join(call_text(c) for c in calls)}, not get_weather"
    call = calls[names.index("get_weather")]
    if "oslo" not in str((arguments(call) or {}).get("city", "")).lower():
        return f"called {call_text(call)}: city is not Oslo"
    return None


def _dropped(before: str, prompt: str, assistant: dict[str, Any], reasoning_field: str) -> list[str]:
    """What of the assistant message sent back (and the tool result) the rendered prompt does not carry.
    The tool's name is in the prompt already (tool declarations, the question): a call sent back must add
    an occurrence to the render of turn 1 alone (`before`)."""
    missing = []
    reasoning = str(assistant.get(reasoning_field) or "").strip()
    if reasoning and reasoning not in prompt:
        missing.append(reasoning_field)
    names = [(c.get("function") or {}).get("name") or "" for c in assistant.get("tool_calls") or []]
    if any(prompt.count(name) <= before.count(name) for name in names):
        missing.append("tool_calls")
    if "sunny" not in prompt:
        missing.append("the tool result")
    return missing


def arguments(call: dict[str, Any]) -> Any:
    """The call's arguments as JSON, or None when they do not parse."""
    raw = (call.get("function") or {}).get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw or "")
    except (TypeError, ValueError):
        return None


# --- replies -----------------------------------------------------------------------------------


def answered(reply: dict[str, Any], reasoning: str) -> bool:
    """A choice came back: text, thinking or a tool call."""
    message = reply.get("message") or {}
    return any(message.get(k) is not None for k in ("content", reasoning, "tool_calls"))


def colours_named(content: str) -> set[str]:
    return {_COLOURS[w] for w in re.findall(r"[a-z]+", content.lower()) if w in _COLOURS}


def describe(reply: dict[str, Any], reasoning: str, width: int = 60) -> str:
    message = reply.get("message") or {}
    parts = [f"{k}={excerpt(message[k], width)}" for k in ("content", reasoning) if message.get(k) is not None]
    parts += [call_text(c) for c in message.get("tool_calls") or []]
    return f"{', '.join(parts) or 'no message'} (finish: {reply.get('finish_reason')})"


def excerpt(text: object, width: int) -> str:
    shown = repr(text)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def call_text(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    return f"{function.get('name')}({excerpt(function.get('arguments'), 60)})"


def solid_png(rgb: tuple[int, int, int], size: int = 64) -> bytes:
    """A size×size PNG of one colour (8-bit RGB, no filter), built with zlib and struct only."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = (b"\x00" + bytes(rgb) * size) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
