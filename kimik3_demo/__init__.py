"""Offline demo inputs for kimik3: a fixture Hugging Face hub, the llama.cpp source archive, and the
preparation that lays both out (`python -m kimik3_demo.prepare`, `python -m kimik3_demo.hub`).

Used by scripts/demo.sh, the tests and the benchmarks; it may import kimik3_reconciler, never the
other way round (an import-linter contract in pyproject.toml).
"""
