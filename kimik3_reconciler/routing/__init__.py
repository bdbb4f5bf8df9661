"""Routing decisions of kimik3's router, PURE (no I/O, no SDK): the `slots` policy and what it reads from requests
and replies. adapters/slot_router.py is the HTTP proxy that runs them."""
