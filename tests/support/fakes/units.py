"""FakeUnits: systemd (systemctl, unit files) with units that drive FakeDocker's containers."""

from __future__ import annotations

from kimik3_reconciler.errors import PermanentError
from support.fakes.docker import FakeDocker


class FakeUnits:
    """systemd as `systemctl show` reports it, files in a dict; a started unit runs its env file's container.

    Like the real unit (`docker start --attach`), an active unit whose container stopped reads as
    inactive; `start` stops the units its `Conflicts=` names (and those naming it), as systemd does.
    """

    def __init__(self, docker: FakeDocker, booted: bool = True, docker_cli: str | None = "/usr/bin/docker"):
        self.docker, self.is_booted, self.docker_cli = docker, booted, docker_cli
        self.has_docker_service = True
        self.packaged: dict[str, str] = {}  # units loaded from elsewhere, e.g. /lib/systemd/system
        self.files: dict[str, str] = {}
        self.loaded: set[str] = set()
        self.state: dict[str, dict[str, str]] = {}
        self.calls: list[str] = []
        self.sysctl: dict[str, str] = {"kernel.numa_balancing": "0"}  # /proc/sys where systemd runs (as FakeHost)

    def booted(self) -> bool:
        return self.is_booted

    def system_state(self) -> str:
        return "running" if self.is_booted else "offline"

    def which(self, program: str) -> str | None:
        return self.docker_cli if program == "docker" else None

    def list_files(self, directory: str, suffix: str) -> list[str]:
        return sorted(p for p in self.files if p.rsplit("/", 1)[0] == directory and p.endswith(suffix))

    def read_file(self, path: str) -> str | None:
        return self.files.get(path)

    def write_file(self, path: str, text: str) -> None:
        self.calls.append(f"write {path}")
        self.files[path] = text

    def remove_file(self, path: str) -> None:
        self.calls.append(f"rm {path}")
        self.files.pop(path, None)

    def _setting(self, path: str, key: str) -> str:
        lines = (self.files.get(path) or "").splitlines()
        return next((ln.split("=", 1)[1].strip('"') for ln in lines if ln.startswith(key + "=")), "")

    def _container(self, unit: str) -> str:
        return self._setting(f"/etc/kimik3/{unit.removesuffix('.service')}.env", "KIMIK3_CONTAINER")

    def _unit_state(self, unit: str) -> dict[str, str]:
        state = self.state.setdefault(
            unit, {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "UnitFileState": ""}
        )
        container = self.docker.containers.get(state.get("container", ""))  # read at start, like EnvironmentFile
        if state["ActiveState"] == "active" and (container is None or container["State"]["Status"] != "running"):
            state.update(ActiveState="inactive", SubState="dead")  # `docker start --attach` returned
        return state

    def show(self, units: list[str], properties: list[str]) -> str:
        blocks = []
        for unit in units:
            state = self._unit_state(unit)
            docker_unit = unit == "docker.service" and self.has_docker_service
            loaded = "loaded" if unit in self.loaded or unit in self.packaged or docker_unit else "not-found"
            fragment = f"/etc/systemd/system/{unit}" if unit in self.loaded else self.packaged.get(unit, "")
            values = {"Id": unit, "LoadState": loaded, "FragmentPath": fragment, **state}
            blocks.append("\n".join(f"{p}={values.get(p, '')}" for p in properties))
        return "\n\n".join(blocks) + "\n"

    def sysctl_value(self, name: str) -> str | None:
        return self.sysctl.get(name)

    def sysctl_load(self, path: str) -> None:  # systemd-sysctl PATH: each `key = value` line written
        self.calls.append(f"systemd-sysctl {path}")
        if path not in self.files:
            raise PermanentError(f"systemd-sysctl {path} failed (exit 1): No such file or directory")
        for line in self.files[path].splitlines():
            if line.strip() and not line.startswith(("#", ";")) and "=" in line:
                key, value = (part.strip() for part in line.split("=", 1))
                if key in self.sysctl:
                    self.sysctl[key] = value

    def systemctl(self, *args: str) -> None:
        self.calls.append("systemctl " + " ".join(args))
        verb, units = args[0], args[1:]
        if verb == "daemon-reload":
            self.loaded = {p.rsplit("/", 1)[1] for p in self.list_files("/etc/systemd/system", ".service")}
        for unit in units:
            if verb in ("start", "enable") and unit not in self.loaded:
                raise PermanentError(f"Unit {unit} not found.")
            state = self._unit_state(unit)
            if verb in ("enable", "disable"):
                state["UnitFileState"] = verb + "d"
            elif verb == "start":
                self._start(unit, state)
            elif verb == "stop" and state["ActiveState"] == "active":
                self.docker.stop_container(state["container"])
                state.update(ActiveState="inactive", SubState="dead")
            elif verb == "reset-failed" and state["ActiveState"] == "failed":
                state.update(ActiveState="inactive", Result="success")

    def _start(self, unit: str, state: dict[str, str]) -> None:
        if state["ActiveState"] == "active":
            return
        mine = set(self._setting(f"/etc/systemd/system/{unit}", "Conflicts").split())
        for other in list(self.state):
            theirs = set(self._setting(f"/etc/systemd/system/{other}", "Conflicts").split())
            if other != unit and (other in mine or unit in theirs):
                self.systemctl("stop", other)
        state["container"] = self._container(unit)
        container = self.docker.containers.get(state["container"])
        if container is None:  # `docker start --attach` of a missing container exits 1
            state.update(ActiveState="failed", SubState="failed", Result="exit-code")
            return
        if container["State"]["Status"] != "running":
            self.docker.start_container(state["container"])
        state.update(ActiveState="active", SubState="running", Result="success")
