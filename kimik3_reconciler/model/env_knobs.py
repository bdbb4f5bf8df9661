"""kimik3's environment knobs: every `KIMIK3_*` variable kimik3 itself reads, what it holds, and the one parser
that reads them. `refuse_bad_knobs` runs before any command (cli.main): a value that does not parse is refused
naming the variable (InputError, exit 2) before anything is observed or changed. An empty value is unset (as
the XDG variables are); a knob's readers ask `knob_value` for the parsed value.

(`KIMIK3_PARALLEL_PIN*` / `KIMIK3_PARALLEL_READ*` are read by the patched llama-server, from `serve.env`; the
unit's env file's `KIMIK3_PROFILE`, `KIMIK3_CONTAINER`... are written by kimik3 for systemd: neither is a knob.)
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.durations import parse_duration

_COUNT = re.compile(r"[1-9][0-9]*")
# Control characters in a path are a quoting accident (a pasted newline, a tab), never a folder anyone meant.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _path(text: str) -> Path:
    if _CONTROL.search(text):
        raise ValueError("expected a path, without control characters (newline, tab...)")
    # Leading/trailing blanks: `KIMIK3_STATE_DIR=" /srv/k3"` would make a folder named " " in the working dir.
    if text != text.strip():
        raise ValueError("expected a path, without blanks around it")
    return Path(text)


def _path_or_off(text: str) -> Path | None:
    return None if text.lower() == "off" else _path(text)


def _count(text: str) -> int:
    # 0 or a negative count used to be taken as 1 without a word: a whole number >= 1 or a refusal.
    if not _COUNT.fullmatch(text):
        raise ValueError("expected a whole number of 1 or more")
    return int(text)


def command_words(text: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:  # an unclosed quote: shlex's own words ("No closing quotation")
        raise ValueError(f"expected command words as a shell splits them ({exc})") from None
    if not words:
        raise ValueError("expected command words, not only blanks")
    return words


# Each knob and its parser (ValueError saying what is expected). docs/operations.md "Environment knobs" has the
# table of defaults and meanings; tests/unit/model/test_env_knobs.py checks both lists and the code's readers agree.
KNOBS: dict[str, Callable[[str], Any]] = {
    "KIMIK3_STATE_DIR": _path,  # `--state-dir`: kimik3's records
    "KIMIK3_CACHE_DIR": _path,  # caches that only cost speed
    "KIMIK3_DOCKERFILE": _path,  # `--dockerfile`
    "KIMIK3_SYSTEMD_ROOT": _path,  # `--systemd-root`
    "KIMIK3_SYSTEMCTL_PREFIX": command_words,  # `--systemctl-prefix`
    "KIMIK3_LOCK_TIMEOUT": parse_duration,  # `--lock-timeout`
    "KIMIK3_HOST_LOCK": _path_or_off,  # the host-wide lock file; `off`: none
    "KIMIK3_DOWNLOAD_WORKERS": _count,  # model files downloaded at a time
    "KIMIK3_LOG_FILE": _path,  # a detached exporter's own log (set by kimik3 when it spawns one)
}


def knob_value(name: str, environ: Mapping[str, str], default: Any = None) -> Any:
    """The knob's parsed value, `default` when unset or empty; InputError naming the variable when it does not
    parse."""
    raw = environ.get(name, "")
    if raw == "":
        return default
    try:
        return KNOBS[name](raw)
    except ValueError as exc:
        raise InputError(f"{name}={raw!r} refused: {exc}") from None


def refuse_bad_knobs(environ: Mapping[str, str]) -> None:
    """Every knob set in `environ` parsed once: the first that does not is refused (InputError naming it)."""
    for name in KNOBS:
        knob_value(name, environ)
