"""Rewrite one section's knobs of a profile (serve for llama.cpp, vllm, sglang) in place (`kimik3 tune --write`),
keeping every comment and the key order: a round-trip YAML load (ruamel.yaml), the knobs set, the measured figures
as a comment. Pure: text in, text out (tune also uses it to make each candidate's profile text)."""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a long comment or value
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def set_knobs(text: str, section: str, knobs: dict[str, Any], note: str | None = None) -> str:
    """`text` with <section>.<knob> = value for each knob (None removes the key: the default applies). Keys that
    exist keep their place and their end-of-line comment; new ones go before the section's last key (so the
    blank line after the section stays where it is); a section the profile leaves to its defaults (`engine: vllm`
    without `vllm:`) is added at the end. `note` becomes a comment line above the section's key."""
    yaml = _yaml()
    data = yaml.load(text)
    fields = data.get(section)
    if fields is None:
        fields = CommentedMap()
        data[section] = fields
    for knob, value in knobs.items():
        if value is None:
            fields.pop(knob, None)
        elif knob in fields:
            fields[knob] = value
        else:
            fields.insert(max(0, len(fields) - 1), knob, value)
    if note:  # added under whatever the author wrote above the section's key
        data.yaml_set_comment_before_after_key(section, before=note)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()
