"""What the helpers' configurations (model/metrics.py ExporterConfig, model/front.py FrontConfig) share: their
identity, a digest of the rendered config, and the URL this machine reaches a helper on."""

from __future__ import annotations

import hashlib
import json
from typing import Any


class HelperConfig:
    """A helper's rendered configuration (a frozen dataclass with `bind`, `port` and `to_json`)."""

    bind: str
    port: int

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def fingerprint(self) -> str:
        """Its identity: a running helper with another one is replaced. json.dumps' default separators, as every
        recorded fingerprint was made with (model/hashing.py's compact form would replace every running helper)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]

    def local_url(self, path: str) -> str:
        """`path` on the helper, as this machine reaches it: a wildcard bind is asked on loopback, an IPv6 literal
        goes in brackets."""
        bind = self.bind
        host = "127.0.0.1" if bind in ("0.0.0.0", "::") else (f"[{bind}]" if ":" in bind else bind)
        return f"http://{host}:{self.port}{path}"
