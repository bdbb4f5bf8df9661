"""`python -m kimik3_reconciler` = the `kimik3` command."""

from kimik3_reconciler.cli import main

main()
