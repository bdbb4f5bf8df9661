"""No module of kimik3 imports itself back through another (an import circle): the import graph, as grimp (the
library lint-imports reads it with) builds it, has no circle outside the CLI package.

The CLI's own circle (cli/__init__.py registers fleet_cmd and fleet_apply, which import its options back) is a
known one, left for the fleet's command modules; every other floor is checked, function-level imports included
(a lazy import hides a circle from the interpreter, not from a reader).
"""

from __future__ import annotations

import grimp

KNOWN = "kimik3_reconciler.cli"


def _circles(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    found = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if graph.find_shortest_chain(importer=imported, imported=importer):
                found.add(tuple(sorted((importer, imported))))
    return found


def test_no_import_circle_outside_the_cli() -> None:
    graph = grimp.build_graph("kimik3_reconciler", cache_dir=None)
    outside = {pair for pair in _circles(graph) if not all(m == KNOWN or m.startswith(f"{KNOWN}.") for m in pair)}
    assert outside == set()
