"""apply's output for a person, and for a machine (issue 39 item 4). Found on a newcomer's run: apply's progress was
raw JSON log lines mixed into the plan text and the verify tables, 40 `lock-wait` lines while it waited. Now, by
default, each step and event is a plain line and long work a bar (a line per quarter off a terminal); the structlog
events (JSON off a terminal) come with `-v` or `--json` only, and `--json`'s stdout is as before. The real CLI on the
orchestrator's fakes (the build says its Dockerfile steps and a compiler line, the download its progress)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

import kimik3_reconciler.adapters as adapters
from kimik3_reconciler import cli
from kimik3_reconciler.console import Stream
from kimik3_reconciler.reporting import CliReporter

PROFILE = FAKE_PROFILE.replace("name: k3-test", "name: k3-out")
FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard" * 40}
COMPILER = "[ 50%] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"
COMPILER_DONE = "[100%] Linking CXX executable bin/llama-server"


def _json_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return [f for f in found if isinstance(f, dict)]


@pytest.fixture
def apply_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a function running apply
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    (tmp_path / "p.yaml").write_text(PROFILE)
    hub = FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub")
    ports, docker = fake_ports(hub)
    download, build = hub.download, docker.build_image

    def download_saying_progress(spec, on_progress):  # noqa: ANN001, ANN202 - as the real hub reports
        for path in spec.missing:
            size = len(FILES[path])
            for done in (0, size // 4, size // 2, size):
                on_progress("total", done, size)  # adapters/hub_download.py's order: the total, then the file
                on_progress(path, done, size)
        return download(spec, on_progress)

    def build_saying_steps(spec, files, on_line):  # noqa: ANN001, ANN202 - the classic builder's lines
        for line in ("Step 1/2 : FROM scratch", "Step 2/2 : RUN make", COMPILER, COMPILER_DONE):
            on_line(line)
        return build(spec, files, on_line)

    monkeypatch.setattr(hub, "download", download_saying_progress)
    monkeypatch.setattr(docker, "build_image", build_saying_steps)
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: ports)

    def run(*flags: str) -> tuple[int, str, str]:
        args = [
            "--dockerfile",
            str(tmp_path / "Dockerfile.llamacpp"),
            "apply",
            *flags,
            "--no-verify-server",
            str(tmp_path / "p.yaml"),
        ]
        result = CliRunner().invoke(cli.main, args, env={"KIMIK3_STATE_DIR": str(tmp_path / "state")})
        return result.exit_code, result.stdout, result.stderr

    return run


def test_apply_speaks_to_a_person_without_json_log_lines(apply_run) -> None:  # noqa: ANN001
    code, out, err = apply_run()
    assert code == 0 and out.strip() == "k3-out: converged after 5 step(s)", (out, err)
    assert _json_lines(err) == [], err  # no machine event without -v
    lines = err.splitlines()
    assert "  + model org/k3@abababababab/UD-Q2_K_XL: 1 of 1 files missing from the cache" in lines, err
    assert "    download: 25 % (50 B of 200 B)" in lines and "    download: 100 % (200 B of 200 B)" in lines, err
    assert not any("k3-UD-Q2_K_XL-00001" in line and "%" in line for line in lines), err  # the total speaks alone
    assert "    build step 1/2: FROM scratch" in lines and "    build step 2/2: RUN make" in lines, err
    assert COMPILER not in err and COMPILER_DONE not in err  # compiler output: -v only; its percent, a quarter's line
    assert "    build step 2/2: compiling 50 %" in lines and "    build step 2/2: compiling 100 %" in lines, err
    assert any(line.startswith("    launched k3-out (") for line in lines), err


def test_with_v_the_events_are_structlog_json_lines_again(apply_run) -> None:  # noqa: ANN001
    code, out, err = apply_run("-v")
    events = _json_lines(err)
    assert code == 0 and out.strip() == "k3-out: converged after 5 step(s)", (out, err)
    assert {"step", "downloaded", "progress", "build", "launched"} <= {e["event"] for e in events}, err
    assert any(e["event"] == "build" and e["line"] == COMPILER for e in events)  # -v: the compiler's lines too
    assert not any(line.startswith("  + model") for line in err.splitlines())


def test_json_output_is_unchanged_one_document_and_json_events(apply_run) -> None:  # noqa: ANN001
    code, out, err = apply_run("--json")
    document = json.loads(out)
    assert code == 0 and document["profile"] == "k3-out" and document["changed"] is True
    assert [s["kind"] for s in document["executed"]] == [e["kind"] for e in _json_lines(err) if e["event"] == "step"]
    assert all(line.startswith("{") for line in err.splitlines() if line.strip()), err


class _Lines:
    """A console off a terminal that keeps what is printed."""

    def __init__(self) -> None:
        self.printed: list[str] = []

    def print(self, *objects: object, **_options: object) -> None:
        self.printed.append(" ".join(getattr(o, "plain", str(o)) for o in objects))


def test_a_long_lock_wait_is_one_line_for_a_person() -> None:
    console = _Lines()
    reporter = CliReporter(console, interactive=False, verbose=False)  # type: ignore[arg-type]
    for waited in range(0, 400, 10):  # 40 of locking.acquire's events: 400 s at one per 10 s
        reporter.event("lock-wait", holder="apply of k3 by pid 7", waited_s=waited, timeout_s=600)
    reporter.event("step", kind="container", action="create", target="k3", reason="not running")
    assert console.printed == [
        "waiting for the host lock, held by apply of k3 by pid 7 (up to 600 s)",
        "  + container k3: not running",
    ]


def test_on_a_terminal_the_lock_wait_is_one_bar_updated(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    monkeypatch.setenv("COLUMNS", "200")  # the bar on one line of the screen
    reporter = CliReporter(Stream(stderr=True), interactive=True, verbose=False)
    for waited in range(0, 400, 10):
        reporter.event("lock-wait", holder="apply of k3 by pid 7", waited_s=waited, timeout_s=600)
    assert reporter._progress is not None and len(reporter._progress.tasks) == 1
    reporter.close()
    drawn = screen.getvalue()
    # Redrawn in place (carriage return, erase line), never scrolled: at most the one line's own newline.
    assert drawn.count("waiting for the host lock") >= 40 and drawn.count("\n") <= 2, repr(drawn[-400:])


def test_the_plain_progress_is_a_line_per_quarter() -> None:
    console = _Lines()
    reporter = CliReporter(console, interactive=False, verbose=False)  # type: ignore[arg-type]
    for done in range(0, 101):
        reporter.progress("loading k3", done << 20, 100 << 20, read_bytes=done << 20)
    assert console.printed == [f"    loading k3: {p} % ({p}.0 MiB of 100.0 MiB)" for p in (25, 50, 75, 100)]
