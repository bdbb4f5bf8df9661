"""The registry of serving engines: the name a profile gives (`engine:`) -> the package that implements
`engines/base.py`'s `ServingEngine` (its module-level `ENGINE`). Names only, no import: the profile schema
takes its choices from here (model/ is below the engines), and `engines.engine_for` imports the package when
a plan first needs it. Adding an engine adds one entry here and one folder under engines/ (docs/design.md)."""

from __future__ import annotations

DEFAULT_ENGINE = "llamacpp"

ENGINES: dict[str, str] = {
    "llamacpp": "kimik3_reconciler.engines.llamacpp",
    "vllm": "kimik3_reconciler.engines.vllm",
}
