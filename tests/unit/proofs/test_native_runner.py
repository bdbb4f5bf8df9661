"""tools/gpu_proof/native_runner.NativeRunner (the CandidateRunner that ran tune on the H200) against a fake
`llama-server`: a small Python program that speaks the endpoints the runner and the bench use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.ports import free_port as _free_port

from kimik3_reconciler.adapters.state_files import StateFiles
from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.bench import BenchSettings
from kimik3_reconciler.model.profile_source import parse_profile
from tests.support.observed import observed

sys.path.insert(0, str(Path(__file__).parents[3] / "tools" / "gpu_proof"))
from native_runner import NativeRunner  # noqa: E402

FAKE = r'''#!PYTHON
"""A fake llama-server: /health, /tokenize, /metrics, /completion (streamed or not); argv as llama-server's."""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
predicted = 0
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body, kind="application/json"):
        data = body.encode()
        self.send_response(code); self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health": self.reply(200, '{"status": "ok"}')
        elif self.path == "/metrics": self.reply(200, f"llamacpp:tokens_predicted_total {predicted}\n", "text/plain")
        else: self.reply(404, "{}")
    def do_POST(self):
        global predicted
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize": return self.reply(200, json.dumps({"tokens": list(range(1, 60))}))
        n = int(body["n_predict"]); predicted += n
        if not body.get("stream"): return self.reply(200, json.dumps({"content": "x" * n, "tokens_predicted": n}))
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for i in range(1, n + 1):
            self.wfile.write(f"data: {json.dumps({'content': 'x', 'tokens': [i], 'tokens_predicted': i})}\n\n".encode())
        timings = {"prompt_n": len(body["prompt"]), "prompt_ms": 1.0, "prompt_per_second": 1000.0,
                   "predicted_n": n, "predicted_ms": 10.0, "predicted_per_second": 100.0}
        self.wfile.write(f"data: {json.dumps({'stop': True, 'tokens_predicted': n, 'timings': timings})}\n\n".encode())
        self.close_connection = True
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''

PROFILE = """apiVersion: kimik3/v1
name: native-runner-test
model: {repo: kimik3-demo/Kimi-K3-tiny-GGUF, revision: d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de, quant: UD-SYNTH}
build: {source: mainline, variant: cpu}
gpus: none
serve: {host: loopback, port: PORT, ctx_size: 4096, parallel: 2, ubatch: UBATCH}
gate: {smoke: false}
"""


def _predicted(url: str) -> int:
    import urllib.request

    return int(urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode().split()[-1])


def _loaded(port: int, ubatch: int = 512):
    return parse_profile(PROFILE.replace("PORT", str(port)).replace("UBATCH", str(ubatch)), source="t.yaml")


def _runner(tmp_path: Path, program: str, loaded) -> NativeRunner:  # noqa: ANN001
    bindir = tmp_path / "bin"
    bindir.mkdir()
    server = bindir / "llama-server"
    server.write_text(program.replace("PYTHON", sys.executable))
    server.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()
    return NativeRunner(bindir, observed(loaded.profile), StateFiles(tmp_path / "state"), logs, ready_timeout_s=20)


def test_converge_launches_the_rendered_argv_once_and_measure_benches_it(tmp_path):
    port = _free_port()
    first, second = _loaded(port, 512), _loaded(port, 1024)
    runner = _runner(tmp_path, FAKE, first)
    try:
        runner.converge(first)
        runner.converge(first)  # the same argv is already serving: no second load
        assert len(runner.loads) == 1 and runner.argv == runner.argv_for(first)
        assert runner.argv[runner.argv.index("--ubatch-size") + 1] == "512"
        run, key = runner.measure(first, BenchSettings(grid=(2,), prompts=2, prompt_tokens=16, output_tokens=8))
        level = run.level(2)
        assert level is not None and level.requests == 4 and level.errors == 0
        assert level.client_tokens == 32 and level.metrics_tokens == 32
        assert key.startswith("bench/native-runner-test/")
        kept = sorted((tmp_path / "state").rglob("*.json"))
        before = _predicted(runner.base_url(first))
        runner.warm_up(first, BenchSettings(grid=(2,), prompts=1, prompt_tokens=16, output_tokens=4))
        assert _predicted(runner.base_url(first)) == before + 2 * 4  # one request per slot, 4 tokens each
        assert sorted((tmp_path / "state").rglob("*.json")) == kept  # sent to the server, never kept
        runner.converge(second)  # another candidate: the old process is stopped, the new argv loaded
        assert len(runner.loads) == 2 and runner.argv[runner.argv.index("--ubatch-size") + 1] == "1024"
    finally:
        runner.stop()
    assert runner.process is None


def test_a_server_that_dies_while_loading_is_a_failed_candidate(tmp_path):
    loaded = _loaded(_free_port())
    runner = _runner(tmp_path, "#!/bin/sh\necho 'failed to load model' >&2\nexit 3\n", loaded)
    with pytest.raises(PermanentError, match="exited with 3"):
        runner.converge(loaded)
    assert runner.process is None and runner.loads == []
