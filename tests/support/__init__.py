"""Test support, never shipped: in-memory fakes of the ports (the fakes/ package, a module per port), one
builder of `Observed` values (observed.py) and the real parts the integration tests drive (realparts.py).

tests/conftest.py puts tests/ on sys.path, so unit and integration tests import `support.<module>`.
"""
