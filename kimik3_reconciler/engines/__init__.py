"""The serving engines, behind one protocol (engines/base.py): `engine_for(name)` gives the implementation of
the profile's `engine:` (the registry: model/engine_names.py), importing its folder when first asked.

Only this resolver names an engine's package (by string, like steps.EXECUTORS' executors); generic code gets
the `ServingEngine` it returns, handed in (`Desired.engine`, arguments), never imports engines/<name>/.
"""

from __future__ import annotations

import importlib
import sys

from kimik3_reconciler.engines.base import ServerSeries, ServingEngine
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.engine_names import ENGINES

__all__ = ["ServerSeries", "ServingEngine", "engine_for"]


def engine_for(name: str) -> ServingEngine:
    """The engine a profile names. An unknown name never reaches here from a validated profile (the schema's
    choices are the registry's); a saved plan or a record from another kimik3 might carry one."""
    entry = ENGINES.get(name)
    if entry is None:
        raise PlanError(f"engine: {name!r} is not one of {', '.join(sorted(ENGINES))}", (("engine",),))
    # Asked several times a plan (the gate, each route): the import system's own cache first, ~15 µs a call saved.
    module = sys.modules.get(entry.package) or importlib.import_module(entry.package)
    engine: ServingEngine = module.ENGINE
    return engine
