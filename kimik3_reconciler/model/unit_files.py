"""systemd unit and env files kimik3 installs: where they live and their kimik3 header (pure)."""

from __future__ import annotations

import hashlib
import re

UNIT_DIR = "/etc/systemd/system"  # paths as systemd sees them; an install root (--systemd-root) prefixes both
ENV_DIR = "/etc/kimik3"
HEADER_PREFIX = "# kimik3: "
_HEADER = re.compile(r"# kimik3: fingerprint=([0-9a-f]{16}) profile=([a-z0-9][a-z0-9-]*)")


def unit_path(unit: str) -> str:
    """`kimi-k3.service` -> /etc/systemd/system/kimi-k3.service"""
    return f"{UNIT_DIR}/{unit}"


def exporter_unit(unit: str) -> str:
    """`kimi-k3.service` -> kimi-k3-metrics.service: the metrics exporter's unit next to the server's."""
    return f"{unit.removesuffix('.service')}-metrics.service"


def runs_exporter_unit(body: str) -> bool:
    """A unit body kimik3 rendered for a metrics exporter (its ExecStart runs `metrics-serve`)."""
    return any(line.startswith("ExecStart=") and " metrics-serve " in line for line in body.splitlines())


def front_unit(unit: str) -> str:
    """`kimi-k3.service` -> kimi-k3-front.service: the front's unit (metrics.handover) next to the server's."""
    return f"{unit.removesuffix('.service')}-front.service"


def runs_front_unit(body: str) -> bool:
    """A unit body kimik3 rendered for a front (its ExecStart runs `front-serve`)."""
    return any(line.startswith("ExecStart=") and " front-serve " in line for line in body.splitlines())


def runs_helper_unit(body: str) -> bool:
    """A unit of one of kimik3's helper processes (the exporter, the front): no GPU, no container."""
    return runs_exporter_unit(body) or runs_front_unit(body)


def env_path(unit: str) -> str:
    """`kimi-k3.service` -> /etc/kimik3/kimi-k3.env"""
    return f"{ENV_DIR}/{unit.removesuffix('.service')}.env"


def body_fingerprint(body: str) -> str:
    """sha256 of everything after the header line, first 16 hex (`tail -n +2 FILE | sha256sum`)."""
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def with_header(body: str, profile: str) -> str:
    return f"{HEADER_PREFIX}fingerprint={body_fingerprint(body)} profile={profile}\n{body}"


def split_header(text: str) -> tuple[str | None, str | None, str]:
    """(header fingerprint, header profile, body); (None, None, text) when the file has no kimik3 header."""
    first, _, body = text.partition("\n")
    match = _HEADER.fullmatch(first)
    if match is None:
        return None, None, text
    return match.group(1), match.group(2), body
