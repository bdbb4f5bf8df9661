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


PIN_MARK = "pin:"  # the end-of-line comment that keeps the branch a commit was resolved from (`kimik3 pin --update`)


def pinned_from(text: str, path: tuple[str, ...]) -> str | None:
    """The branch or tag `kimik3 pin` resolved the field at `path` from (its `# pin: <name>` comment), if any."""
    node, key = _parent(_yaml().load(text), path)
    comment = _eol_comment(node, key)
    words = comment.lstrip("#").split() if comment else []
    return words[1].rstrip(";") if len(words) >= 2 and words[0] == PIN_MARK else None


def set_pins(text: str, pins: dict[tuple[str, ...], tuple[str, str | None]]) -> str:
    """`text` with each field at `path` set to its pinned value, comments and key order kept (a round trip); `pins`
    maps a path to (value, the branch or tag it was resolved from, or None: no record). A recorded name becomes the
    field's end-of-line comment `# pin: <name>`, before what the author wrote there."""
    yaml = _yaml()
    data = yaml.load(text)
    for path, (value, name) in pins.items():
        node, key = _parent(data, path)
        node[key] = value
        if name is None:
            continue
        old = _eol_comment(node, key)
        words = old.lstrip("#").split() if old else []
        if words[:1] == [PIN_MARK]:  # pinned before: replace the record, keep the rest of the comment
            old = " ".join(words[2:])
        rest = old.lstrip("#").strip() if old else ""
        if key in node.ca.items:
            node.ca.items[key][2] = None
        node.yaml_add_eol_comment(f"{PIN_MARK} {name}" + (f"; {rest}" if rest else ""), key)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _parent(data: Any, path: tuple[str, ...]) -> tuple[Any, str]:
    node = data
    for part in path[:-1]:
        node = node[part]
    return node, path[-1]


def _eol_comment(node: Any, key: str) -> str | None:
    entry = node.ca.items.get(key) if hasattr(node, "ca") else None
    token = entry[2] if entry and len(entry) > 2 else None
    return token.value.strip() if token is not None else None
