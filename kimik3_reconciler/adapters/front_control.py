"""An apply's side of the front's control paths (issue 29): POST hold / release with the token header, on this
host, straight to the front's address (never through an HTTP proxy). http.client: imported only by an apply that
replaces a server behind a front."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from kimik3_reconciler.model.front import TOKEN_HEADER


class FrontControl:
    def post(self, url: str, token: str, body: dict[str, Any], timeout_s: float) -> tuple[int, dict[str, Any] | str]:
        """(status, the JSON answer); (0, why) when nothing answers in `timeout_s` (a hold answers after its drain)."""
        import http.client

        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout_s)
        try:
            connection.request(
                "POST",
                parts.path,
                body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", TOKEN_HEADER: token},
            )
            reply = connection.getresponse()
            text = reply.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            return 0, f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()
        try:
            answer = json.loads(text)
        except ValueError:
            return reply.status, text[:200]
        return reply.status, answer if isinstance(answer, dict) else text[:200]
