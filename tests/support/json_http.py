"""The base of the tests' small HTTP servers (stdlib http.server): JSON answers, and no request log on stderr."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    def send_json(self, status: int, body: Any) -> None:  # noqa: ANN401 - any JSON value
        """`body` as JSON with its length, under `status`."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass  # a test's server stays quiet
