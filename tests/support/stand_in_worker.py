"""A stand-in replica smg accepts as a worker (what it asks before it lists one: /health, /v1/models, /version, ...:
200 and one model), served from a thread: for the router's own tests, where no model server is needed."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Worker(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        return


def serve_worker(port: int) -> ThreadingHTTPServer:
    """Serving on 127.0.0.1:`port` until `.shutdown()`."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Worker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
