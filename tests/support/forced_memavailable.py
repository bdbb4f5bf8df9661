"""Run the real kimik3 CLI with /proc/meminfo's MemAvailable read as the first argument (bytes): the integration
tests' forced small budget (issue 27: the demo's 2.4 MB model fits any real host twice). Everything else, the
page cache included, is the real host's.

    python tests/support/forced_memavailable.py BYTES apply --json profile.yaml
"""

from __future__ import annotations

import re
import runpy
import sys

from kimik3_reconciler.adapters.host_linux import LinuxHost

FORCED = int(sys.argv.pop(1))
_real = LinuxHost.meminfo


def _forced(self: LinuxHost) -> str:
    return re.sub(r"^MemAvailable:\s+\d+ kB$", f"MemAvailable: {FORCED // 1024} kB", _real(self), flags=re.M)


LinuxHost.meminfo = _forced  # type: ignore[method-assign]
sys.argv[0] = "kimik3"
runpy.run_module("kimik3_reconciler", run_name="__main__", alter_sys=True)
