"""No module of kimik3 imports itself back through another (an import circle): the import graph, as grimp (the
library lint-imports reads it with) builds it, has no circle outside the packages whose circles are known.

Known: the CLI's (cli/__init__.py registers the fleet commands, which import its helpers back) and the planner's
(desired, engine_plan, routes, host_gate, model_step and conflict_step reach each other through function-level
imports). Every other floor is checked, function-level imports included (a lazy import hides a circle from the
interpreter, not from a reader).
"""

from __future__ import annotations

import grimp

KNOWN = ("kimik3_reconciler.cli", "kimik3_reconciler.planning")


def _circles(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    found = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if graph.find_shortest_chain(importer=imported, imported=importer):
                found.add(tuple(sorted((importer, imported))))
    return found


def _known(module: str) -> bool:
    return any(module == package or module.startswith(f"{package}.") for package in KNOWN)


def test_no_import_circle_outside_the_known_packages() -> None:
    graph = grimp.build_graph("kimik3_reconciler", cache_dir=None)
    assert {pair for pair in _circles(graph) if not all(_known(m) for m in pair)} == set()
