"""huggingface_hub keeps one HTTP client per process (`get_session()`), made on its first request and kept: its
proxies are read from the environment *then* (httpx's trust_env). A test that points HTTP_PROXY at a fixture server
and makes the first hub request leaves every later in-process hub request going through that proxy after the
server stopped: "hub ... not reachable: Connection refused" (CI, seed 1837970960: tests/unit/adapters/
test_hub_token.py, then test_pin_hub_registry.py's `kimik3 pin` through CliRunner). `forget_hub_client()` drops it,
so the next request makes a client from the environment it runs in."""

from __future__ import annotations

import sys


def forget_hub_client() -> None:
    """Close huggingface_hub's shared client, if the process made one; the next hub request makes a new one."""
    http = sys.modules.get("huggingface_hub.utils._http")
    if http is not None:  # never imported here: no client to forget, and nothing to import for it
        http.close_session()
