"""Human-readable sizes and durations for plan text, and the load rate a forecast assumes before a host has
measured its own."""

# Seed 000 measured ~17 min to read 802 GB (--load-mode none reads everything up front), i.e. ~0.8 GB/s: the load
# forecast's rate until this host has recorded a load (Observed.load_rate).
SEED_LOAD_BYTES_PER_S = 802e9 / (17 * 60)


def gib(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
