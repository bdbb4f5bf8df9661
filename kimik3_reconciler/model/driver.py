"""NVIDIA driver versions: as numbers to compare (a host's driver against an image's floor) and as nvidia-smi
prints them."""

from __future__ import annotations


def version(text: str) -> tuple[int, ...]:
    """'580.159.04' -> (580, 159, 4); the leading numeric fields only."""
    parts = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def driver_text(v: tuple[int, ...]) -> str:
    """(580, 65, 6) -> '580.65.06', as nvidia-smi prints driver versions."""
    return ".".join(f"{n:02d}" if i == 2 else str(n) for i, n in enumerate(v))


def driver_at_least(driver: str | None, floor: tuple[int, ...]) -> bool:
    """The host's driver (None: no driver seen) is `floor` or newer."""
    return driver is not None and version(driver) >= floor
