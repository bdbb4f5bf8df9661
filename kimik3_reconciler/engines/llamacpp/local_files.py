"""Which files of `model.local_path` llama-server opens (pure: names and first bytes in, the files or the refusal
out): one GGUF file, or every shard of one split (`-0000i-of-0000n.gguf`). observe/local_model.py reads the path and
names the field (and carries the rule mark: local-path-gguf); each refusal here is the text that follows the path."""

from __future__ import annotations

import re

from kimik3_reconciler.engines.base import WeightFilesRefused

MAGIC = b"GGUF"
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def served_files(names: list[str], folder: bool) -> list[str]:
    """The files to serve, by name: `names` is the file's own name, or (`folder`) the names of the folder's files."""
    if not folder:
        files = [name for name in names if name.endswith(".gguf")]
        if not files:
            raise WeightFilesRefused(f"is not a GGUF file (no .gguf suffix: {names[0]})")
        return files
    ggufs = sorted(name for name in names if name.endswith(".gguf"))
    if not ggufs:
        raise WeightFilesRefused("is a folder with no GGUF shards (no *.gguf file in it)")
    split = [m for m in (_SHARD.search(name) for name in ggufs) if m]
    if split:
        counts = {int(m.group(2)) for m in split}
        if len(counts) > 1:
            raise WeightFilesRefused(
                f"holds shards of more than one split ({', '.join(ggufs)}): keep one model a folder",
            )
        total = counts.pop()
        missing = sorted(set(range(1, total + 1)) - {int(m.group(1)) for m in split})
        if missing:
            # A split with a shard missing fails llama-server's load after a long read of the others.
            raise WeightFilesRefused(f"is missing shard(s) {', '.join(f'{i:05d}' for i in missing)} of {total:05d}")
        return [name for name in ggufs if _SHARD.search(name)]
    if len(ggufs) > 1:
        raise WeightFilesRefused(
            f"holds {len(ggufs)} GGUF files that are not the shards of one split ({', '.join(ggufs)}): "
            "name the file to serve",
        )
    return ggufs


def check_start(name: str, head: bytes) -> None:
    """Refuse a file whose first bytes are not the GGUF magic."""
    start = head[: len(MAGIC)]
    if start != MAGIC:
        # llama-server would fail minutes into a launch (after the old server stopped) on a file that is not a GGUF.
        raise WeightFilesRefused(f"is not a GGUF file: {name} starts with {start!r}, not {MAGIC!r}")
