"""One way to replace a file whole: a unique hidden temp file beside it, renamed into place. A reader (systemd,
an operator, another kimik3) never sees half a file, and concurrent writers of one path never collide. The state
records, the cache entries, the unit files, saved plans (`plan -out`) and the profile `tune --write` rewrites all
go through `write_atomically`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(
    path: Path, text: str, *, durable: bool = False, mode: int | None = None, make_folder: bool = True
) -> None:
    """`text` (UTF-8) at `path`, whole or not at all; the folder is made when missing (`make_folder`: a path the
    user named, such as `plan -out`, is not: its missing folder is the error). `durable`: fsynced before the
    rename (a record that must survive a crash); `mode`: the file's permissions (mkstemp makes 0600).
    Raises OSError naming `path`, with the temp file removed."""
    try:
        _write(path, text, durable, mode, make_folder)
    except OSError as exc:
        # A write or fsync into a full disk raises ENOSPC with no file name: the user would read "no space left"
        # with no path to free (exit 8's message names the path: errors.LocalFileError).
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def _write(path: Path, text: str, durable: bool, mode: int | None, make_folder: bool) -> None:
    if make_folder:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:32]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
