"""Run a command on a fleet host over OpenSSH (the `ssh` client: the operator's keys, config and known_hosts).

ssh hands the remote shell one string: it is `shlex.join` of the argv, so each word arrives as one word whatever
it holds; the callers pass fixed words only (the fleet never puts a profile field in a command line: the profile
travels on stdin). BatchMode: a host that would ask for a password fails at once, exit 255, instead of waiting."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from typing import Protocol

TIMED_OUT = 124


class SshTarget(Protocol):
    address: str
    user: str | None
    port: int | None
    ssh_options: tuple[str, ...]  # from the inventory's ansible_ssh_* vars


class SshShell:
    """`run(host, argv, stdin, timeout_s) -> (exit status, stdout, stderr)`; 255 is ssh's own failure."""

    def __init__(self, ssh: str = "ssh", connect_timeout_s: int = 10):
        self.ssh, self.connect_timeout_s = ssh, connect_timeout_s

    def command(self, host: SshTarget, argv: Sequence[str]) -> list[str]:
        """The local argv: ssh's options, the destination, then the remote words quoted into one string."""
        words = [self.ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}", *host.ssh_options]
        if host.port:
            words += ["-p", str(host.port)]
        if host.user:
            words += ["-l", host.user]
        return [*words, "--", host.address, shlex.join(argv)]

    def run(self, host: SshTarget, argv: Sequence[str], stdin: str | None, timeout_s: float) -> tuple[int, str, str]:
        try:
            done = subprocess.run(
                self.command(host, argv),
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return TIMED_OUT, "", f"no answer in {timeout_s:g} s"
        except FileNotFoundError:
            return 255, "", f"{self.ssh}: the OpenSSH client is not installed here"
        return done.returncode, done.stdout, done.stderr
