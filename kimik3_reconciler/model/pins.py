"""A build source's pin (`SourcePin`): the repository, the commit built by default and its build number. The table
of pins is the building engine's (llama.cpp's: engines/llamacpp/pins.py, named by the registry's `pins`):
`BuildSpec.pin` (model/profile.py) loads it when a plan first asks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourcePin:
    """One build source: its repository, pinned commit and the build number baked into the binary."""

    source: str
    repository: str  # owner/name on GitHub
    commit: str  # 40 lowercase hex
    date: str
    build_number: int
    vision: bool  # has the MoonViT-3d tower (accepts --mmproj)
    note: str

    def archive_url(self, commit: str | None = None) -> str:
        """GitHub's source archive of `commit` (default: the pin) in this repository."""
        return f"https://github.com/{self.repository}/archive/{commit or self.commit}.tar.gz"
