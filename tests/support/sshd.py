"""A throwaway OpenSSH server on a loopback port, so a worker's Docker is reached the way an operator's
is: the docker SDK's ssh:// transport runs the `ssh` client, which runs `docker system dial-stdio` on
the far side (here: this machine's own daemon, as the current user, who can talk to its socket).

Everything is under one temporary folder: the host key, a client key, an authorized_keys holding only
that key, a known_hosts holding only that host key, and an `ssh` wrapper (first on PATH) that adds
`-F <its config>`: the user's own ~/.ssh is never read or written.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class Sshd:
    port: int
    user: str
    bin_dir: Path  # put first on PATH: its `ssh` uses only this server's keys and config

    @property
    def docker_url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kimik3-test", "-f", str(path)], check=True)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"sshd is not listening on 127.0.0.1:{port}")


@contextmanager
def running_sshd(root: Path, port: int) -> Iterator[Sshd]:
    """sshd on 127.0.0.1:`port` for the current user (key only), stopped (by its pid) on exit."""
    if not Path(SSHD).exists() or shutil.which("ssh") is None:
        raise RuntimeError("openssh-server and openssh-client are needed (scripts/test.sh installs them)")
    root.mkdir(parents=True, exist_ok=True)
    user = getpass.getuser()
    _keygen(root / "host_key")
    _keygen(root / "client_key")
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    host_pub = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (root / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {root / 'host_key'}",
                f"PidFile {root / 'sshd.pid'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                f"AllowUsers {user}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin prohibit-password",
                "AllowTcpForwarding no",
                "X11Forwarding no",
                "",
            ]
        )
    )
    (root / "ssh_config").write_text(
        "\n".join(
            [
                "Host 127.0.0.1",
                f"  Port {port}",
                f"  User {user}",
                f"  IdentityFile {root / 'client_key'}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {root / 'known_hosts'}",
                "  StrictHostKeyChecking yes",
                "  BatchMode yes",
                "  ConnectTimeout 10",
                "",
            ]
        )
    )
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {root / "ssh_config"} "$@"\n')
    wrapper.chmod(0o755)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder, when run as root
    # Its log (-e: every connection's lines) goes to a file: a pipe nobody read filled after a few hundred
    # connections (64 KiB), sshd then blocked writing to it, and ssh sessions late in a module broke off.
    with open(root / "sshd.log", "wb") as log:  # sshd keeps its own descriptor of it
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stdout=subprocess.DEVNULL, stderr=log
        )
    try:
        _wait_listening(port, proc, root / "sshd.log")
        yield Sshd(port, user, bin_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def sshd_on_path(root: Path, port: int) -> Iterator[Sshd]:
    """running_sshd, its `ssh` wrapper first on this process's PATH meanwhile: kimik3 run as a subprocess (the docker
    SDK's ssh:// transport) uses the test's keys and config."""
    with running_sshd(root, port) as server:
        old = os.environ["PATH"]
        os.environ["PATH"] = server.env()["PATH"]
        try:
            yield server
        finally:
            os.environ["PATH"] = old
