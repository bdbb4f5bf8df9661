"""GENERIC: the rules every engine's profile meets (secrets, listeners, literal paths, pins), in llama.cpp's RULES
order (engines/llamacpp/rules/order.py); an engine's own rules module lists them first in its RULES. Another engine's fields are refused
before these run (engine_fields, engines.py)."""

from __future__ import annotations

from kimik3_reconciler.model.profile_rules import Rule, listeners, no_secrets, paths, pinned

GENERIC: tuple[Rule, ...] = (
    no_secrets.endpoint,
    no_secrets.secrets,
    listeners.host,
    listeners.systemd,
    listeners.metrics,
    paths.paths_literal,
    pinned.pins,
)
