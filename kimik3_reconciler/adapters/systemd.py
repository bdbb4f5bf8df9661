"""systemd through `systemctl` (argv lists, never a shell), and unit/env files under an install root.

`prefix` runs every command elsewhere (`["docker", "exec", "sd"]`, `["ssh", "host"]`): the live
test drives a systemd that is PID 1 inside a container this way. `root` is where the files land
as seen from here (the same machine: "/"; that container: its merged rootfs).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kimik3_reconciler.adapters.atomic_files import write_atomically
from kimik3_reconciler.errors import PermanentError, TransientError

# stop waits for ExecStop (docker stop -t 120) plus systemd's own margin; start of Type=simple is quick.
_TIMEOUT_S = 200
_SYSTEMD_SYSCTL = ("/usr/lib/systemd/systemd-sysctl", "/lib/systemd/systemd-sysctl")


class SystemdUnits:
    def __init__(self, root: str | Path = "/", prefix: list[str] | tuple[str, ...] = ()):
        self.root, self.prefix = Path(root), list(prefix)

    def _local(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def _run(self, argv: list[str], timeout: float = 10) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([*self.prefix, *argv], capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found")
        except subprocess.TimeoutExpired as exc:
            raise TransientError(f"{' '.join(argv)}: no answer within {timeout:.0f} s") from exc

    def booted(self) -> bool:
        if not self.prefix:
            return Path("/run/systemd/system").is_dir()  # sd_booted(): the check systemd itself uses
        return self._run(["test", "-d", "/run/systemd/system"]).returncode == 0

    def system_state(self) -> str:
        result = self._run(["systemctl", "is-system-running"])
        return result.stdout.strip() or "offline"

    def which(self, program: str) -> str | None:
        found = self._run(["which", program]).stdout.strip()
        return found if found.startswith("/") else None

    def list_files(self, directory: str, suffix: str) -> list[str]:
        folder = self._local(directory)
        if not folder.is_dir():
            return []
        # Symlinks are systemd's (masks -> /dev/null, units linked from /lib): never kimik3's files.
        return sorted(
            f"{directory}/{p.name}"
            for p in folder.iterdir()
            if p.name.endswith(suffix) and p.is_file() and not p.is_symlink()
        )

    def read_file(self, path: str) -> str | None:
        try:
            return self._local(path).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise PermanentError(f"cannot read {self._local(path)}: {exc.strerror}") from exc

    def write_file(self, path: str, text: str) -> None:
        target = self._local(path)
        try:
            write_atomically(target, text, mode=0o644)  # a reader (systemd, an operator) never sees half a file
        except OSError as exc:
            raise PermanentError(f"cannot write {target}: {exc.strerror}") from exc

    def remove_file(self, path: str) -> None:
        self._local(path).unlink(missing_ok=True)

    def show(self, units: list[str], properties: list[str]) -> str:
        result = self._run(["systemctl", "show", "-p", ",".join(properties), *units])
        if result.returncode != 0:
            raise TransientError(f"systemctl show {' '.join(units)}: {result.stderr.strip()}")
        return result.stdout

    def sysctl_value(self, name: str) -> str | None:
        path = "/proc/sys/" + name.replace(".", "/")  # the name is kimik3's (model/host_settings.py), never a profile's
        if not self.prefix:
            try:
                return Path(path).read_text().strip()
            except OSError:
                return None
        result = self._run(["cat", path])
        return result.stdout.strip() if result.returncode == 0 else None

    def sysctl_load(self, path: str) -> None:
        # systemd-sysctl with a file argument applies that file alone (no condition on /proc/sys, unlike its
        # unit), as boot applies it: the same parser, the same writes; every systemd has it.
        for program in _SYSTEMD_SYSCTL:
            result = self._run([program, path], timeout=30)
            if result.returncode not in (126, 127):  # not there (no merged /usr): the next place
                break
        if result.returncode != 0:
            raise PermanentError(
                f"systemd-sysctl {path} failed (exit {result.returncode}): {(result.stderr or result.stdout).strip()}"
            )

    def systemctl(self, *args: str) -> None:
        result = self._run(["systemctl", *args], timeout=_TIMEOUT_S)
        if result.returncode != 0:
            raise PermanentError(
                f"systemctl {' '.join(args)} failed (exit {result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )
