"""What each of kimik3's helper processes (the exporter, the front) reads from its environment: a spawned helper
gets these names from the apply's environment and nothing else, so a secret the apply holds (HF_TOKEN, a
registry password, a proxy URL with credentials) never sits in a long-lived process's /proc/PID/environ.

The state directory and the helper's log file are not here: the spawner sets them (adapters/processes.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Every helper: the interpreter's import path (kimik3 run from a source tree), the locale its text files are read
# in, the home folder (Path.home()), the time zone of its log lines and PATH for any program it runs.
_PROCESS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH")
# The exporter reads Docker (the container's state): the SDK's own variables, the context file kimik3 reads for
# the socket (adapters/docker_socket.py), and the ssh agent an ssh:// DOCKER_HOST logs in with.
_DOCKER = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "SSH_AUTH_SOCK")
# NVML's library (pynvml dlopens libnvidia-ml.so.1) is found through it on hosts with the driver off the default
# path.
_NVML = ("LD_LIBRARY_PATH",)

EXPORTER_READS = (*_PROCESS, *_DOCKER, *_NVML)
# The front reads only its records in the state dir and the API key file they name; it talks to no daemon.
FRONT_READS = _PROCESS


def helper_environment(environ: Mapping[str, str], reads: Iterable[str], set_here: Mapping[str, str]) -> dict[str, str]:
    """The helper's whole environment: the names it reads, from `environ` where set there, then `set_here`."""
    return {**{name: environ[name] for name in reads if name in environ}, **set_here}
