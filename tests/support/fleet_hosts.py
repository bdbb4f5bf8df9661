"""A fleet on one machine (shared/TESTING.md §12): N "hosts", each a network namespace with its own address on a
bridge, its own sshd (own host key; one client key for all) and its own Docker daemon; a registry on the bridge
holding the llama.cpp CPU image, which every host's daemon pulls by digest (no host builds).

The hosts share this machine's filesystem (the model cache, kimik3's checkout): what makes each one a host is its
network, its dockerd and the environment its sshd gives every session (`SetEnv`: DOCKER_HOST, KIMIK3_STATE_DIR,
KIMIK3_HOST_LOCK, HF_HOME), so a `kimik3` run over SSH converges that host's daemon with that host's records.

Addresses: 10.231.77.0/24 (bridge .1, host i at .10+i) — a range nothing else on this machine uses; the bridge and
every veth are made here and removed at the end, with the namespaces, the daemons (by pid) and the nsfs mounts the
daemons leave under their exec-root, also when a step in between failed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.231.77"
BRIDGE = "k3fl0"
GATEWAY = f"{SUBNET}.1"
SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class RigHost:
    name: str  # also the namespace's name and the inventory hostname
    address: str
    root: Path  # this host's private folder (daemon data, state, sshd files)

    @property
    def netns(self) -> str:
        return f"/var/run/netns/{self.name}"

    @property
    def docker_socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.docker_socket}"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def docker(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        """The docker CLI against this host's daemon."""
        done = subprocess.run(
            ["docker", "-H", self.docker_host, *args], capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode:
            raise RuntimeError(f"docker {' '.join(args)} on {self.name}: {done.stderr.strip()}")
        return done.stdout.strip()

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A command inside this host's network namespace (not over SSH)."""
        return subprocess.run(["nsenter", f"--net={self.netns}", *argv], capture_output=True, text=True, check=check)


@dataclass(frozen=True)
class Rig:
    hosts: tuple[RigHost, ...]
    ssh_key: Path
    known_hosts: Path
    registry: str  # ADDRESS:PORT on the bridge, as the hosts' daemons reach it
    root: Path

    def inventory(self, group: str = "serving") -> dict:
        """A standard Ansible inventory (YAML form) of the hosts, reached over real SSH as root with the rig's key."""
        common = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.ssh_key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes "
            "-o IdentitiesOnly=yes",
            "ansible_python_interpreter": shutil.which("python3") or "/usr/bin/python3",
        }
        return {
            "all": {
                "children": {
                    group: {"hosts": {h.name: {"ansible_host": h.address} for h in self.hosts}, "vars": common}
                }
            }
        }

    def ssh(
        self, host: RigHost, *argv: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """`argv` run on `host` over SSH (the words are quoted for the remote shell)."""
        import shlex

        done = subprocess.run(
            [
                "ssh",
                "-i",
                str(self.ssh_key),
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                f"root@{host.address}",
                shlex.join(argv),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode:
            raise RuntimeError(f"ssh {host.name} {argv}: exit {done.returncode}: {done.stderr.strip()}")
        return done


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _wait(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kimik3-fleet-rig", "-f", str(path)], check=True
    )


def _kill_pidfile(path: Path, timeout: float = 20.0) -> None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    _alive(pid)


def _alive(pid: int) -> bool:
    """False once `pid` has exited (reaped here when it is this process's child: a zombie still answers kill 0)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _unmount_under(root: Path) -> None:
    """Every mount left under `root` (dockerd's nsfs mount of the namespace, overlay mounts), deepest first."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(str(root))), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _network(host: RigHost, index: int) -> None:
    """The namespace, a veth into the bridge, the host's address; loopback up."""
    veth, peer = f"{host.name}", f"{host.name}p"
    _ip("netns", "add", host.name)
    _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
    _ip("link", "set", veth, "master", BRIDGE)
    _ip("link", "set", veth, "up")
    _ip("link", "set", peer, "netns", host.name)
    _ip("-n", host.name, "link", "set", peer, "name", "eth0")
    _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
    _ip("-n", host.name, "link", "set", "eth0", "up")
    _ip("-n", host.name, "link", "set", "lo", "up")


def _sshd(host: RigHost, client_pub: Path) -> None:
    """sshd in the namespace on ADDRESS:22, key-only for root; each session gets this host's environment."""
    d = host.root / "sshd"
    d.mkdir(parents=True)
    _keygen(d / "host_key")
    (d / "authorized_keys").write_text(client_pub.read_text())
    env = {
        "DOCKER_HOST": host.docker_host,
        "KIMIK3_STATE_DIR": str(host.state_dir),
        "KIMIK3_HOST_LOCK": str(host.root / "kimik3.lock"),
        "HF_HOME": str(host.root / "hf-home"),
        "KIMIK3_DOCKERD_RESTART_TEST": "0",
    }
    (d / "sshd_config").write_text(
        "\n".join(
            [
                "Port 22",
                f"ListenAddress {host.address}",
                f"HostKey {d / 'host_key'}",
                f"PidFile {d / 'sshd.pid'}",
                f"AuthorizedKeysFile {d / 'authorized_keys'}",
                "AllowUsers root",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "AllowTcpForwarding no",
                "X11Forwarding no",
                "MaxSessions 20",
                "MaxStartups 30",
                "Subsystem sftp /usr/lib/openssh/sftp-server",  # Ansible copies files over sftp (else slower fallbacks)
                "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()),
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    log = open(d / "sshd.log", "wb")  # noqa: SIM115 - the daemon's stderr for its whole life
    proc = subprocess.Popen(
        ["nsenter", f"--net={host.netns}", SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )
    (d / "run.pid").write_text(str(proc.pid))
    _wait(
        f"sshd on {host.name}",
        lambda: (
            host.run("bash", "-c", f"exec 3<>/dev/tcp/{host.address}/22", check=False).returncode == 0
            or proc.poll() is not None
        ),
    )
    if proc.poll() is not None:
        raise RuntimeError(f"sshd on {host.name} exited: {(d / 'sshd.log').read_text()}")


def _dockerd(host: RigHost, registry: str) -> None:
    """The host's own dockerd, started inside its namespace (`nsenter --net`: `ip netns exec` remounts /sys and
    dockerd then fails on the devices cgroup); the bridge registry allowed without TLS."""
    log = open(host.root / "dockerd.log", "wb")  # noqa: SIM115
    subprocess.Popen(
        [
            "nsenter",
            f"--net={host.netns}",
            "dockerd",
            "--data-root",
            str(host.root / "docker-data"),
            "--exec-root",
            str(host.root / "x"),
            "-H",
            host.docker_host,
            "--pidfile",
            str(host.root / "docker.pid"),
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            "--insecure-registry",
            registry,
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )
    _wait(
        f"dockerd on {host.name}",
        lambda: subprocess.run(["docker", "-H", host.docker_host, "info"], capture_output=True).returncode == 0,
        timeout=90,
    )


def _bridge_registry(root: Path, loopback_storage: Path, port: int) -> str:
    """A second docker-registry on the bridge address serving the loopback registry's storage (the main dockerd
    pushes to 127.0.0.1, which it allows without TLS; the hosts pull from the bridge)."""
    from support.realparts import REPO_ROOT

    root.mkdir(parents=True, exist_ok=True)
    (root / "storage").symlink_to(loopback_storage)
    started = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "ensure-registry.sh"), str(port), str(root), GATEWAY],
        capture_output=True,
        text=True,
    )
    if started.returncode:
        raise RuntimeError(started.stderr)
    return started.stdout.strip()


def _teardown(hosts: list[RigHost]) -> None:
    with ThreadPoolExecutor(len(hosts)) as pool:
        list(pool.map(_host_down, hosts))


def _host_down(host: RigHost) -> None:
    """Containers, the daemon and sshd (by pid), the mounts under its folder, its veth, its namespace."""
    if host.docker_socket.exists():
        ids = subprocess.run(
            ["docker", "-H", host.docker_host, "ps", "-aq"], capture_output=True, text=True
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "-H", host.docker_host, "rm", "-f", *ids], capture_output=True, timeout=120)
    _kill_pidfile(host.root / "docker.pid")
    _kill_pidfile(host.root / "sshd" / "run.pid")
    _kill_left_in(host.name)
    _unmount_under(host.root)
    subprocess.run(["ip", "link", "del", host.name], capture_output=True)
    subprocess.run(["ip", "netns", "del", host.name], capture_output=True)


def _kill_left_in(namespace: str) -> None:
    """Every process still in the host's namespace killed: sshd's per-connection sessions (`sshd: root@notty`)
    outlive the daemon killed by its pid file, and once the namespace is gone their peer never closes: they stayed
    on the machine for good (29 after a day of CI runs here)."""
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
    for pid in listed:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@contextmanager
def fleet_rig(count: int, prefix: str = "k3fl") -> Iterator[Rig]:
    """`count` hosts up (network, sshd, dockerd started in parallel) and a registry on the bridge; all removed after.
    The image is not loaded here: `publish_image` pushes it, `pull_everywhere` pulls it by digest."""
    if shutil.which("nsenter") is None or not Path(SSHD).exists() or shutil.which("docker-registry") is None:
        raise RuntimeError(
            "the fleet rig needs nsenter, openssh-server and docker-registry (scripts/test.sh installs them)"
        )
    root = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir="/tmp"))  # short: unix socket paths are at most 107 bytes
    hosts = [RigHost(f"{prefix}-h{i}", f"{SUBNET}.{10 + i}", root / f"h{i}") for i in range(1, count + 1)]
    with ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        cleanup.callback(_teardown, hosts)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)  # a rig a killed run left behind
        for host in hosts:
            subprocess.run(["ip", "link", "del", host.name], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.name], capture_output=True)
        _ip("link", "add", BRIDGE, "type", "bridge")
        cleanup.callback(subprocess.run, ["ip", "link", "del", BRIDGE], capture_output=True)
        _ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        _keygen(root / "client_key")
        from support.realparts import REPO_ROOT
        from support.registry import free_port

        loopback = root / "registry-lo"
        port = free_port()
        started = subprocess.run(
            ["bash", str(REPO_ROOT / "scripts" / "ensure-registry.sh"), str(port), str(loopback)],
            capture_output=True,
            text=True,
        )
        if started.returncode:
            raise RuntimeError(started.stderr)
        cleanup.callback(_kill_pidfile, loopback / "registry.pid")
        bridge_port = free_port()
        registry = f"{GATEWAY}:{bridge_port}"
        cleanup.callback(_kill_pidfile, root / "registry-br" / "registry.pid")
        _bridge_registry(root / "registry-br", loopback / "storage", bridge_port)

        def up(indexed: tuple[int, RigHost]) -> None:
            index, host = indexed
            host.root.mkdir(parents=True)
            host.state_dir.mkdir()
            _network(host, index)
            _sshd(host, root / "client_key.pub")
            _dockerd(host, registry)

        with ThreadPoolExecutor(len(hosts)) as pool:
            list(pool.map(up, enumerate(hosts, 1)))
        known = root / "known_hosts"
        known.write_text(
            "".join(
                f"{h.address} {' '.join((h.root / 'sshd' / 'host_key.pub').read_text().split()[:2])}\n" for h in hosts
            )
        )
        yield Rig(tuple(hosts), root / "client_key", known, registry, root)


def _loopback_address(rig: Rig) -> str:
    config = (rig.root / "registry-lo" / "config.yml").read_text()
    return next(line.split()[1] for line in config.splitlines() if line.strip().startswith("addr:"))


def publish_image(rig: Rig, tag: str, repository: str = "kimik3/llamacpp") -> str:
    """Push the main dockerd's `tag` to the rig's registry; the digest reference the hosts pull
    (`BRIDGE_REGISTRY/REPOSITORY@sha256:…`)."""
    pushed = f"{_loopback_address(rig)}/{repository}:fleet"
    subprocess.run(["docker", "tag", tag, pushed], check=True, capture_output=True)
    try:
        subprocess.run(["docker", "push", pushed], check=True, capture_output=True, timeout=1200)
        digests = json.loads(
            subprocess.run(["docker", "image", "inspect", pushed], check=True, capture_output=True, text=True).stdout
        )[0]["RepoDigests"]
    finally:
        subprocess.run(["docker", "rmi", pushed], capture_output=True)  # the tag only: the image stays
    digest = next(d for d in digests if d.startswith(pushed.rsplit(":", 1)[0])).partition("@")[2]
    return f"{rig.registry}/{repository}@{digest}"


def pull_everywhere(rig: Rig, ref: str) -> None:
    """Every host's daemon pulls `ref` by digest, in parallel."""
    with ThreadPoolExecutor(len(rig.hosts)) as pool:
        list(pool.map(lambda h: h.docker("pull", ref, timeout=1800), rig.hosts))


def stop_router(work: Path, fleet: str) -> None:
    """The router (kimik3's and smg), started detached by a `fleet apply` run from `work` (state in
    `work/controller-state`), stopped by the pids it recorded, with the CLI's own stop (SIGTERM, then SIGKILL)."""
    from kimik3_reconciler.cli.fleet_router import stop_router as stop_recorded

    stop_recorded(work / "controller-state", fleet)


def ssh_wrapper(work: Path, rig: Rig) -> Path:
    """A folder holding an `ssh` with the rig's key and known_hosts, to put first on a main host's PATH: what the docker
    SDK's ssh:// transport runs to reach a worker's Docker (root's own ~/.ssh is never read or written)."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    wrapper.write_text(
        f"#!/bin/sh\nexec /usr/bin/ssh -i {rig.ssh_key} -o UserKnownHostsFile={rig.known_hosts} "
        '-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o BatchMode=yes "$@"\n'
    )
    wrapper.chmod(0o755)
    return bin_dir


class RotationSampler:
    """How many workers the router has in rotation, read every second in a thread."""

    def __init__(self, router) -> None:  # noqa: ANN001 - adapters.router_smg.SmgRouter
        self.router, self.samples = router, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RotationSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(sum(w.in_rotation for w in self.router.workers()))
            self._stop.wait(1.0)
