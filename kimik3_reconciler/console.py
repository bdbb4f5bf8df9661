"""The CLI's output streams: rich where its styling shows, plain writes where it would not.

rich costs a no-op plan ~35 ms of imports (rich.console, rich.text, their styles and segments) to print a
few lines that, piped into CI logs or a file, come out as plain text anyway. `Stream` prints `Styled` lines
itself when rich would print them unstyled and untouched (not a terminal, no FORCE_COLOR/TTY_COMPATIBLE/
TTY_INTERACTIVE, no tab or control character that rich would expand or strip) and hands everything else to
a rich Console made on first use: a terminal, tables, progress, markup-free strings. The bytes are rich's
either way (tests/unit/cli/test_console.py compares them on every plan case).

`closed_pipes_dropped` is the other half of the streams: a reader that goes (`kimik3 plan … | head -1`) ends the
output quietly, never the command with a BrokenPipeError (exit 8, "a local file") or rich's exit 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")  # rich's own terminal overrides
_REWRITTEN = frozenset("\t\x07\x08\x0b\x0c\x0d")  # rich expands tabs and strips these control codes
UNBOUNDED_WIDTH = 400  # columns a table may take off a terminal: wider than any kimik3 table, so none is cut


class Styled:
    """A line in styled pieces: the part of rich.Text that kimik3's plan and messages use."""

    __slots__ = ("parts",)

    def __init__(self, text: str = "", style: str = ""):
        self.parts: list[tuple[str, str]] = [(text, style)]

    def append(self, text: str, style: str = "") -> Styled:
        self.parts.append((text, style))
        return self

    def __add__(self, other: Styled) -> Styled:
        joined = Styled()
        joined.parts = self.parts + other.parts
        return joined

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.parts)

    def to_rich(self) -> Any:
        from rich.text import Text

        (first, style), *rest = self.parts
        text = Text(first, style=style)
        for piece, piece_style in rest:
            text.append(piece, style=piece_style or None)
        return text


class Stream:
    """stdout or stderr as kimik3 prints to it (soft wrap, no markup, no highlighting)."""

    def __init__(self, stderr: bool = False):
        self.stderr = stderr
        self._console: Any = None

    @property
    def file(self) -> TextIO:
        return sys.stderr if self.stderr else sys.stdout

    @property
    def rich(self) -> Any:
        """The rich Console, made on first use."""
        if self._console is None:
            from rich.console import Console

            # Piped or in a CI log, rich lays tables out for 80 columns: bench's 13 columns came out as '0.…' and
            # '17…', every figure cut. Off a terminal (and with no COLUMNS given) a table gets the width it needs.
            wide = None if "COLUMNS" in os.environ or self._isatty() else UNBOUNDED_WIDTH
            self._console = Console(stderr=self.stderr, soft_wrap=True, markup=False, highlight=False, width=wide)
        return self._console

    def _isatty(self) -> bool:
        isatty = getattr(self.file, "isatty", None)
        try:
            return bool(isatty is not None and isatty())
        except ValueError:
            return False

    def _plain(self) -> bool:
        """rich would print unstyled here: not a terminal, and nothing tells rich otherwise."""
        if self._console is not None or any(name in os.environ for name in _RICH_ENV):
            return False
        isatty = getattr(self.file, "isatty", None)
        try:
            return isatty is not None and not isatty()
        except ValueError:
            return False

    @property
    def is_terminal(self) -> bool:
        return False if self._plain() else self.rich.is_terminal

    def print(self, *objects: Any, **options: Any) -> None:
        if (
            self._plain()
            and set(options) <= {"highlight"}
            and all(isinstance(o, Styled) and not _REWRITTEN & set(o.plain) for o in objects)
        ):
            self.file.write(" ".join(o.plain for o in objects) + "\n")
            return
        self.rich.print(*(o.to_rich() if isinstance(o, Styled) else o for o in objects), **options)

    def __getattr__(self, name: str) -> Any:  # anything else rich's Console does (tables, Live, width)
        return getattr(self.rich, name)


class PipeEnd:
    """sys.stdout or sys.stderr while a command runs. Once its reader is gone (EPIPE), what is written to it is
    dropped: the descriptor is pointed at /dev/null, as Python's documented SIGPIPE recipe does (its buffered rest
    then never fails at exit either), and the command goes on to its own end and exit code. Ending it there instead
    would stop an apply halfway because `| head` had read enough; the endless commands (`status --watch`,
    `reconcile`) ask `reader_gone` and stop."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._drop()

    def _drop(self) -> None:
        self.reader_gone = True
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture): the stream only
            self._stream = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process's stdout
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer...: the stream's own
        return getattr(self._stream, name)


def reader_gone(stream: object = None) -> bool:
    """Whether stdout's (or `stream`'s) reader has gone: a write met the closed pipe since `closed_pipes_dropped`
    began, or the pipe says so before any write (`status --watch` off a terminal writes nothing until it ends)."""
    stream = sys.stdout if stream is None else stream
    return bool(getattr(stream, "reader_gone", False)) or _pipe_closed(stream)


def _pipe_closed(stream: object) -> bool:
    """A pipe's write end polls as POLLERR once its read end is closed (Linux, as for EPIPE); a file or a
    terminal never does."""
    import select

    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture): only a failed write says
        return False
    poller = select.poll()
    poller.register(fd, 0)  # no events asked: POLLERR and POLLHUP come whatever is asked
    return any(events & select.POLLERR for _, events in poller.poll(0))


@contextmanager
def closed_pipes_dropped() -> Iterator[None]:
    """stdout and stderr as `PipeEnd`s for the block (the command), flushed at its end: output still buffered
    when the block ends meets a closed pipe here, not in the interpreter's last flush (exit 120, "Exception
    ignored")."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, PipeEnd):
        sys.stdout = PipeEnd(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, PipeEnd):
        sys.stderr = PipeEnd(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = saved
