"""A stand-in replica smg accepts as a worker (what it asks before it lists one: /health, /v1/models, /version, ...:
200 and one model), served from a thread: for the router's own tests, where no model server is needed."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

from support.json_http import JsonHandler


class _Worker(JsonHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_json(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})


def serve_worker(port: int) -> ThreadingHTTPServer:
    """Serving on 127.0.0.1:`port` until `.shutdown()`."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Worker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
