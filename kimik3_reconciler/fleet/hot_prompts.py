"""The operator's declared hot prompts (the fleet file's `rollout.warm_prompts`): system prompts and tool schemas a
rolled host prefills before it rejoins the router, where its slots' caches could not be kept (fleet/warm.py). kimik3
never records users' prompts: this file is the operator's, written by hand. PURE: text in, values out.

    prompts:
      - messages:                        # as a chat request sends them (the conversation's shared start)
          - {role: system, content: "You are the build agent. ..."}
        tools: [{type: function, function: {name: run, parameters: {...}}}]   # optional, OpenAI tool schemas
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kimik3_reconciler.errors import ProfileError, ProfileProblem
from kimik3_reconciler.model.profile_rules import FieldPath
from kimik3_reconciler.model.profile_source import load_yaml, validation_problems

MAX_PROMPTS_CHARS = 4 * 1024 * 1024  # system prompts and tool schemas: a few hundred KiB at most
_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True)


class Message(BaseModel):
    model_config = _CONFIG
    role: Literal["system", "developer", "user", "assistant"]
    content: Annotated[str, Field(min_length=1)]


class HotPrompt(BaseModel):
    """One prompt prefix the fleet's conversations share: its leading messages and the tools it declares."""

    model_config = _CONFIG
    messages: Annotated[list[Message], Field(min_length=1)]
    tools: list[dict[str, Any]] | None = None


class HotPromptsFile(BaseModel):
    model_config = _CONFIG
    prompts: Annotated[list[HotPrompt], Field(min_length=1)]


def parse_hot_prompts(text: str, source: str) -> tuple[dict[str, Any], ...]:
    """Each declared prompt as a chat request's body (`messages`, and `tools` where given), in file order;
    ProfileError naming `file:line: field` of every problem."""
    if len(text) > MAX_PROMPTS_CHARS:
        raise ProfileError([ProfileProblem(source, None, "", f"{len(text) // 1024} KiB: too large for hot prompts")])
    written: dict[FieldPath, str] = {}
    data, lines, found = load_yaml(text, written)
    problems = [ProfileProblem(source, line, ".".join(map(str, path)), message) for line, path, message in found]
    if data is None or problems:
        raise ProfileError(problems or [ProfileProblem(source, 1, "", "empty: list the hot prompts under `prompts:`")])
    try:
        spec = HotPromptsFile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(validation_problems(exc, source, lines, written, HotPromptsFile)) from None
    return tuple(
        {
            "messages": [m.model_dump() for m in p.messages],
            **({"tools": json.loads(json.dumps(p.tools))} if p.tools else {}),
        }
        for p in spec.prompts
    )
