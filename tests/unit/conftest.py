"""tests/unit holds one folder per floor of the package (model, planning, engines, steps, ...; docs/design.md
"Layers"), each file named test_<concept>.py with a basename unique under tests/ (pytest's default import mode
imports a test file by its basename). A few tests reuse another test module's builders by that name
(`from test_plan_cases import build_case`), across folders: every floor folder is put on sys.path here, so the
name resolves whichever file pytest collects first."""

import sys
from pathlib import Path

for floor in sorted(p for p in Path(__file__).resolve().parent.iterdir() if p.is_dir() and p.name != "__pycache__"):
    if str(floor) not in sys.path:
        sys.path.append(str(floor))
