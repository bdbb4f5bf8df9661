"""`metrics_http.serve` (what `kimik3 metrics-serve` runs): the sites answer on uvloop's event loop, and SIGTERM
(how kimik3 and systemd stop the exporter) ends it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from support.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
SERVER = """
import asyncio, sys
from aiohttp import web
from kimik3_reconciler.adapters.metrics_http import serve

async def loop_kind(_):
    return web.Response(text=type(asyncio.get_running_loop()).__module__)

app = web.Application()
app.router.add_get("/loop", loop_kind)
serve([(app, "127.0.0.1", int(sys.argv[1]))])
"""


def test_serve_runs_on_uvloop_and_stops_on_sigterm():
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/loop", timeout=2) as reply:
                    kind = reply.read().decode()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "serve did not answer"
                time.sleep(0.05)
        assert kind.startswith("uvloop")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
