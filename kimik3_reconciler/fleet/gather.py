"""Ask every host's own kimik3 at once: its version, then a command on the host's effective profile (`plan --json`,
`status --json`), over a `HostShell` (adapters/ssh_shell.py: ssh). A host that cannot answer is named with why
(unreachable, another kimik3, kimik3 missing, its command refused), never a traceback.

The command line is fixed words (the inventory's kimik3_command, the subcommand, `--json`, `/dev/stdin`); the
profile travels on stdin. No profile field is ever part of what the remote shell reads."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kimik3_reconciler.fleet.values import FleetHost
from kimik3_reconciler.model.plan import shown

T = TypeVar("T")
UNREACHABLE = 255  # ssh's own exit status: it could not connect or authenticate (ssh(1))
NOT_FOUND = 127  # the remote shell found no such command
TIMED_OUT = 124  # the shell adapter's: the command outlived its timeout


class HostShell(Protocol):
    """Runs argv on a host (its shell reads them quoted), `stdin` as its input: (exit status, stdout, stderr)."""

    def run(
        self, host: FleetHost, argv: Sequence[str], stdin: str | None, timeout_s: float
    ) -> tuple[int, str, str]: ...


@dataclass(frozen=True)
class HostAnswer:
    """One host's answer: its JSON document, or why there is none (`problem`: unreachable | version | missing |
    refused | timeout) and the message naming it."""

    host: str
    document: Mapping[str, Any] | None
    problem: str | None = None
    message: str = ""
    version: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _last_line(text: str) -> str:
    """The last non-empty line of a host's output, escaped (model.plan.shown): it reaches this terminal."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return shown(lines[-1].strip()) if lines else ""


def _failed(host: FleetHost, code: int, err: str, what: str) -> HostAnswer:
    if code == UNREACHABLE:
        return HostAnswer(
            host.name,
            None,
            "unreachable",
            f"{host.name} ({host.ssh_target}) is unreachable over SSH: {_last_line(err) or 'ssh exited 255'}",
        )
    if code == TIMED_OUT:
        return HostAnswer(host.name, None, "timeout", f"{host.name}: {what} did not answer in time ({_last_line(err)})")
    if code == NOT_FOUND:
        return HostAnswer(
            host.name,
            None,
            "missing",
            f"{host.name}: {' '.join(host.kimik3_command)} is not "
            f"installed there (exit 127: {_last_line(err)}); set kimik3_command in the inventory",
        )
    return HostAnswer(host.name, None, "refused", f"{host.name}: {what} exited {code}: {_last_line(err)}")


def ask(shell: HostShell, host: FleetHost, words: Sequence[str], identity: str, timeout_s: float) -> HostAnswer:
    """`kimik3 --version` and `kimik3 WORDS --json /dev/stdin` (the host's effective profile on stdin) on `host`, at
    once (both only read; a host's answer waits for the slower, not the sum); the answer is the second's when the
    host's kimik3 is `identity`."""
    asked: dict[str, tuple[int, str, str]] = {}
    argv = (*host.kimik3_command, *words, "--json", "/dev/stdin")
    second = threading.Thread(
        target=lambda: asked.update(answer=shell.run(host, argv, host.profile_text, timeout_s)),
        name=f"fleet-{host.name}",
        daemon=True,
    )
    second.start()
    code, out, err = shell.run(host, (*host.kimik3_command, "--version"), None, timeout_s)
    second.join()
    if code != 0:
        return _failed(host, code, err, "kimik3 --version")
    version = shown(out.strip().removeprefix("kimik3 ").strip())
    if version != identity:
        # Another kimik3 plans with other rules and fingerprints: its plan is not this one's to price or apply.
        return HostAnswer(
            host.name,
            None,
            "version",
            f"{host.name} runs kimik3 {version or '(unknown)'}, not this "
            f"kimik3 {identity}: install the same kimik3 there (fleet apply installs the pinned one)",
            version,
        )
    code, out, err = asked.get("answer", (TIMED_OUT, "", "no answer"))
    try:
        document = json.loads(out) if out.strip() else None
    except ValueError:
        document = None
    if isinstance(document, dict) and document.get("ok") is False and isinstance(document.get("error"), dict):
        error = document["error"]  # the host's kimik3 refused (cli/json_out.py's document): its message and code
        return HostAnswer(
            host.name,
            None,
            "refused",
            f"{host.name}: kimik3 {' '.join(words)} exited "
            f"{error.get('exit_code', code)}: {shown(str(error.get('message', '')))}",
            version,
        )
    if code != 0 or not isinstance(document, dict):
        answer = _failed(host, code if code != 0 else 1, err or out, f"kimik3 {' '.join(words)}")
        return HostAnswer(answer.host, None, answer.problem, answer.message, version)
    return HostAnswer(host.name, document, version=version)


def gather(hosts: Sequence[FleetHost], one: Callable[[FleetHost], T], workers: int = 16) -> tuple[T, ...]:
    """`one(host)` for every host at once (a thread each, up to `workers`), answers in the hosts' order."""
    if not hosts:
        return ()
    with ThreadPoolExecutor(max_workers=min(workers, len(hosts)), thread_name_prefix="fleet-host") as pool:
        return tuple(pool.map(one, hosts))
