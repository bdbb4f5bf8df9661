"""`kimik3 fleet apply FILE` (issue 36 item 3): the rollout through Ansible behind the router, and the hidden
`kimik3 fleet router-step out|in` the rendered playbook runs on the controller between a host's steps.

apply: the fleet lock; the router up (cli/fleet_router.py: kimik3's router and smg behind it, or smg alone, as the
fleet file's router.policy says; the hosts that serve registered); the playbook and inventory rendered (fleet/playbook.py) into `<state>/fleet/<name>/run/`;
`ansible-playbook` run; its outcome read back from the rollout record the router steps write
(`<state>/fleet/<name>/rollout.json`): which hosts are done, which host failed which gate. A rollout killed midway
resumes: hosts the record lists as done with the same profiles are left out of the next run."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from kimik3_reconciler.cli import _err, _out, _run
from kimik3_reconciler.cli.options import RegistryAddress, duration_option
from kimik3_reconciler.errors import PlanError, StepError


class RolloutHalted(StepError):
    """A host failed a gate: reverted by its own kimik3, back in rotation, the rollout stopped there."""


def _record_path(state_dir: Path, fleet_name: str) -> Path:
    return state_dir / "fleet" / fleet_name / "rollout.json"


def _read_record(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_record(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    tmp.replace(path)


def worker_url(fleet_host) -> str:  # noqa: ANN001 - fleet.values.FleetHost
    """Where the router reaches a host's server (fleet/server_load.py `server_url`): the address it binds, 127.0.0.1
    for loopback (the fleet allows that only on the router's machine), the host's address for a wildcard."""
    from kimik3_reconciler.fleet.server_load import server_url

    return server_url(fleet_host)


def mirror_port(fleet_host) -> int:  # noqa: ANN001 - fleet.values.FleetHost
    """The port a host's model mirror listens on: the host var kimik3_mirror_port, else fleet/host_vars.py's."""
    from kimik3_reconciler.errors import InputError
    from kimik3_reconciler.fleet.host_vars import mirror_port as port_of

    port = port_of(fleet_host.vars)
    if port is None:  # fleet validation refuses it at its line (fleet/listeners.py); a Fleet made elsewhere may not
        raise InputError(f"{fleet_host.name}: kimik3_mirror_port: a TCP port (1-65535)")
    return port


def mirror_urls(fleet) -> dict[str, str]:  # noqa: ANN001 - fleet.Fleet
    """Each host's model mirror (cli/fleet_mirror.py), on the address the router reaches it at: the site's."""
    return {h.name: f"{worker_url(h).rsplit(':', 1)[0]}:{mirror_port(h)}" for h in fleet.hosts}


def _router_urls(fleet) -> tuple[str, str, str, int]:  # noqa: ANN001 - fleet.Fleet
    """smg's control API and metrics, its address and port (fleet/router_layout.py: behind kimik3's router under
    `slots`, on the router's own port otherwise): what the rollout's router steps, status and recover talk to."""
    from kimik3_reconciler.fleet.router_layout import router_layout

    layout = router_layout(fleet.router)
    return layout.smg_url, layout.smg_metrics_url, layout.bind, layout.smg_port


def _smg_installed() -> None:
    """Every target's router is smg (behind kimik3's router or alone): its binary missing is refused (exit 2) before
    the fleet lock and the rollout record are written, as ansible-playbook's is (it used to exit 1 after both)."""
    from kimik3_reconciler.adapters.router_smg import SMG_MISSING, smg_binary
    from kimik3_reconciler.errors import InputError

    if smg_binary() is None:
        raise InputError(SMG_MISSING)


def _ensure_router(fleet, state_dir: Path) -> None:  # noqa: ANN001
    """The fleet's router converged (cli/fleet_router.py), every serving host in smg."""
    from kimik3_reconciler.cli.fleet_router import ensure_router

    ensure_router(fleet, state_dir, {h.name: worker_url(h) for h in fleet.hosts}, _serves)


def _serves(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]


@click.command(name="apply")
@click.argument("file", type=click.Path(dir_okay=False))
@duration_option(
    "--traffic-timeout",
    "30s",
    "how long to wait, after a host is back in the router, for the router to send it a request (30s, 2m, or seconds)",
    minimum=0.0,
)
@click.option(
    "--install",
    "wheelhouse",
    default=None,
    type=click.Path(file_okay=False, exists=True),
    help="install kimik3 on every host first, from this folder (its wheel and dependencies: "
    "`pip wheel . -w DIR`) into the host var kimik3_venv; the rollout then runs that kimik3",
)
@click.option(
    "--registry",
    default=None,
    type=RegistryAddress(),
    help="the site's registry (ADDRESS:PORT, reached by the hosts' Docker daemons): the first host rolled pushes "
    "the image its server runs there, every later host pulls it by digest before its apply (no other host builds)",
)
@click.option(
    "--json", "json_out", is_flag=True, help="print the outcome as JSON on stdout (Ansible's output stays on stderr)"
)
@click.pass_context
@_run
def apply_cmd(
    ctx: click.Context, file: str, traffic_timeout: float, wheelhouse: str | None, registry: str | None, json_out: bool
) -> None:
    """Roll the fleet file's profile across its hosts through Ansible, batch by batch, behind the router."""
    from kimik3_reconciler.adapters.ansible_play import FleetLock, ansible_playbook
    from kimik3_reconciler.cli.fleet_cmd import load_fleet
    from kimik3_reconciler.engines import engine_for
    from kimik3_reconciler.fleet.playbook import RolloutHost, RouterStep
    from kimik3_reconciler.fleet.targets.ansible import AnsibleTarget

    state_dir = Path(ctx.obj["state_dir"])  # --state-dir, else $KIMIK3_STATE_DIR, else the default (cli.main)
    fleet = load_fleet(file)
    mirrors = mirror_urls(fleet)  # before anything runs: a bad kimik3_mirror_port is refused with nothing touched
    if fleet.target == "ansible":
        # The fleet extra missing: refused (exit 2) here, not after the router started and the lock was taken.
        ansible_playbook()
    _smg_installed()
    # The same for --install's wheelhouse and each host's kimik3_venv (the Ansible target installs; Slurm does not).
    wheels = _install(wheelhouse, fleet) if wheelhouse and fleet.target == "ansible" else None
    base = state_dir / "fleet" / fleet.name
    with FleetLock(base / "lock"):
        record_path = _record_path(state_dir, fleet.name)
        digest = _digest([h.profile_text for h in fleet.hosts])
        record = _read_record(record_path)
        if record.get("digest") != digest or record.get("complete"):
            record = {"digest": digest, "done": [], "failed": None, "complete": False}
        record["failed"] = None
        _write_record(record_path, record)
        _ensure_router(fleet, state_dir)
        if fleet.target == "slurm":
            _roll_on_slurm(fleet, base / "run", record_path, traffic_timeout, json_out)
            return
        done = set(record["done"])
        batches = [tuple(h for h in batch if h not in done) for batch in fleet.rollout.batches()]
        batches = [b for b in batches if b]
        if done:
            _err.print(f"resuming: {', '.join(sorted(done))} already rolled with these profiles", highlight=False)
        run_dir = base / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        install = _packed(*wheels, run_dir) if wheels else None
        hosts = []
        order = [name for batch in fleet.rollout.batches() for name in batch]
        for index, fleet_host in enumerate(fleet.hosts):
            profile_file = run_dir / f"host-{index}.yaml"
            profile_file.write_text(fleet_host.profile_text)
            connection = {k: v for k, v in fleet_host.vars.items() if k.startswith("ansible_") or k == "kimik3_venv"}
            connection.setdefault("ansible_host", fleet_host.address)
            command = (f"{fleet_host.vars['kimik3_venv']}/bin/kimik3",) if install else fleet_host.kimik3_command
            series = engine_for(fleet_host.profile.engine).series
            hosts.append(
                RolloutHost(
                    fleet_host.name,
                    connection,
                    command,
                    worker_url(fleet_host),
                    str(profile_file),
                    (series.running, series.waiting),
                    mirror_port(fleet_host),
                    tuple(mirrors[name] for name in order if name != fleet_host.name),
                )
            )
        url, metrics_url, _, _ = _router_urls(fleet)
        step = RouterStep(
            (
                sys.executable,
                "-m",
                "kimik3_reconciler",
                "--state-dir",
                str(state_dir),
                "fleet",
                "router-step",
                "--record",
                str(record_path),
            ),
            url,
            metrics_url,
            fleet.rollout.drain_timeout_s,
            fleet.rollout.min_serving,
            traffic_timeout,
            fleet.rollout.warm_prompts,
        )
        target = AnsibleTarget(_RunFolder(run_dir), hosts, step, install, registry)
        target.render(fleet, batches)
        if not batches:
            _outcome(json_out, fleet.name, record, 0.0, f"{fleet.name}: every host already rolled; nothing to do")
            return
        _say_rollout("rollout", batches, fleet.rollout.min_serving)
        started = time.monotonic()
        target.roll(fleet, batches)
        _finish(record_path, batches, target.code, started, json_out, fleet.name)


class _RunFolder:
    """fleet/targets/ansible.PlaybookRunner: the documents as files of the run folder (JSON for .json, YAML else),
    ansible-playbook run on them (its output on stderr)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def write(self, documents) -> None:  # noqa: ANN001 - Mapping[str, object]
        import yaml

        for name, data in documents.items():
            text = json.dumps(data, indent=2) if name.endswith(".json") else yaml.safe_dump(data, sort_keys=False)
            (self.run_dir / name).write_text(text)

    def run(self, playbook_name: str, inventory_name: str) -> int:
        from kimik3_reconciler.adapters.ansible_play import run_playbook

        return run_playbook(self.run_dir, self.run_dir / playbook_name, self.run_dir / inventory_name, sys.stderr)


def _roll_on_slurm(fleet, run_dir: Path, record_path: Path, traffic_timeout: float, json_out: bool) -> None:  # noqa: ANN001
    """The rollout on a Slurm fleet (fleet/targets/slurm.py): the replicas whose job does not serve their profile,
    node by node, with the same router steps and record."""
    from kimik3_reconciler.cli.fleet_slurm import slurm_batches, slurm_target

    batches = slurm_batches(fleet)
    if not batches:
        record = _read_record(record_path)
        _outcome(json_out, fleet.name, record, 0.0, f"{fleet.name}: every replica's job serves its profile")
        return
    _say_rollout("rollout (slurm)", batches, fleet.rollout.min_serving)
    target, router = slurm_target(fleet, run_dir, record_path, traffic_timeout)
    started = time.monotonic()
    try:
        target.roll(fleet, batches)
    finally:
        router.close()
    _finish(record_path, batches, 0, started, json_out, fleet.name)


def _say_rollout(label: str, batches: list, min_serving: int) -> None:
    _err.print(
        f"{label}: " + " → ".join(",".join(b) for b in batches) + f" (at least {min_serving} in rotation throughout)",
        highlight=False,
    )


def _finish(record_path: Path, batches: list, code: int, started: float, json_out: bool, name: str) -> None:
    """The rollout's outcome from its record: halted (a host failed a gate), failed (the runner's exit code), or
    complete."""
    record = _read_record(record_path)
    if record.get("failed"):
        failed = record["failed"]
        left = [h for b in batches for h in b if h not in record["done"] and h != failed["host"]]
        raise RolloutHalted(
            f"{failed['host']} failed {failed['gate']}; its kimik3 reverted it and it is back "
            f"in rotation ({failed.get('rotation', 'unknown')}); rollout halted"
            + (f": {', '.join(left)} not rolled" if left else "")
        )
    if code != 0:
        raise StepError(
            f"ansible-playbook exited {code}: see its output above; rolled so far: "
            f"{', '.join(record.get('done', [])) or 'none'} (the next `fleet apply` resumes)"
        )
    record["complete"] = True
    _write_record(record_path, record)
    took = time.monotonic() - started
    _outcome(
        json_out,
        name,
        record,
        took,
        f"{name}: rolled {len(record['done'])} host(s) in {took:.0f} s: " + ", ".join(record["done"]),
    )


def _outcome(json_out: bool, name: str, record: dict, took: float, line: str) -> None:
    if json_out:
        click.echo(
            json.dumps(
                {"fleet": name, "ok": True, "rolled": record.get("done", []), "seconds": round(took, 1)}, indent=2
            )
        )
    else:
        _out.print(line, highlight=False)


def _install(wheelhouse: str, fleet) -> tuple[Path, str]:  # noqa: ANN001 - fleet.Fleet
    """(the wheelhouse, its kimik3 wheel: exactly one); every host must name its venv (the host var kimik3_venv)."""
    from kimik3_reconciler.errors import InputError

    wheels = sorted(p.name for p in Path(wheelhouse).glob("kimik3*-*.whl"))
    if len(wheels) != 1:
        raise InputError(
            f"--install {wheelhouse}: holds {len(wheels)} kimik3 wheels ({', '.join(wheels) or 'none'})"
            "; it must hold exactly one (`pip wheel . -w DIR` in a fresh folder)"
        )
    missing = [h.name for h in fleet.hosts if not str(h.vars.get("kimik3_venv", "")).startswith("/")]
    if missing:
        raise InputError(
            f"--install: host(s) {', '.join(missing)} have no kimik3_venv (an absolute path) in the "
            "inventory: where kimik3 is installed there"
        )
    return Path(wheelhouse).resolve(), wheels[0]


def _packed(wheelhouse: Path, wheel: str, run_dir: Path):  # noqa: ANN202 - fleet.playbook.Install
    """The wheelhouse as one tar file in the run folder (the playbook unpacks it on each host)."""
    import tarfile

    from kimik3_reconciler.fleet.playbook import Install

    archive = run_dir / "wheelhouse.tar"
    with tarfile.open(archive, "w") as tar:
        for found in sorted(wheelhouse.glob("*.whl")):
            tar.add(found, arcname=found.name)
    return Install(str(archive), wheel)


def server_key(profile, host_name: str) -> str | None:  # noqa: ANN001 - Profile | None
    """The key the router steps send with their reads of the server (llama-server answers /metrics 401 without it):
    `serve.api_key_file` read as the warm step reads it (cli/fleet_warm.py); None without a profile, or (said, naming
    the file, never the key) where the controller cannot read one."""
    from kimik3_reconciler.adapters.slot_cache import SlotCacheError
    from kimik3_reconciler.cli import fleet_warm

    if profile is None:
        return None
    try:
        return fleet_warm.server_key(profile)
    except SlotCacheError as exc:
        click.echo(f"{host_name}: {exc}: its server's /metrics is read without a key")
        return None


def _served_tokens(url: str, api_key: str | None) -> float | None:
    """The server's own count of generated tokens (llama-server --metrics; vLLM/SGLang's counters), None when it
    does not say."""
    import httpx

    from kimik3_reconciler.model.api_keys import bearer

    try:
        text = httpx.get(f"{url}/metrics", timeout=3, headers=bearer(api_key)).text
    except httpx.HTTPError:
        return None
    from kimik3_reconciler.engines import engine_for
    from kimik3_reconciler.model.engine_names import ENGINES

    names = {engine_for(name).series.generated_tokens_total for name in ENGINES}  # whichever engine serves there
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.split("{")[0].split(" ")[0] in names]
    return sum(values) if values else None


@click.command(name="router-step", hidden=True)
@click.argument("direction", type=click.Choice(["out", "in"]))
@click.option("--record", "record_file", required=True, type=click.Path(dir_okay=False))
@click.option("--router", "router_url", required=True)
@click.option("--metrics", "metrics_url", required=True)
@click.option("--host", "host_name", required=True)
@click.option("--worker", "worker", required=True)
@click.option("--drain-timeout", default=60.0, type=float)
@click.option("--min-serving", default=1, type=int)
@click.option("--traffic-timeout", default=30.0, type=float)
@click.option("--failed-gate", default=None)
@click.option(
    "--in-flight-series", default="", help="the server's gauges of requests it runs and queues, comma-separated"
)
@click.option("--profile", "profile_file", default=None, type=click.Path(dir_okay=False), help="the host's new profile")
@click.option("--warm-prompts", default=None, type=click.Path(dir_okay=False), help="the fleet's hot prompts file")
@_run
def router_step(
    direction: str,
    record_file: str,
    router_url: str,
    metrics_url: str,
    host_name: str,
    worker: str,
    drain_timeout: float,
    min_serving: int,
    traffic_timeout: float,
    failed_gate: str | None,
    in_flight_series: str,
    profile_file: str | None,
    warm_prompts: str | None,
) -> None:
    """One host out of the router (drained, its slots saved) or back in (warmed, in rotation, then sent traffic);
    run by the playbook."""
    from kimik3_reconciler.adapters.router_smg import SmgRouter
    from kimik3_reconciler.cli import fleet_warm

    router = SmgRouter(router_url, metrics_url)
    record_path = Path(record_file)
    profile, prompts = _warm_inputs(profile_file, warm_prompts)
    key = server_key(profile, host_name)
    try:
        if direction == "out":
            series = tuple(name for name in in_flight_series.split(",") if name)
            _take_out(router, host_name, worker, drain_timeout, min_serving, server_in_flight(worker, series, key))
            if profile is not None:
                click.echo(fleet_warm.save_before_swap(record_path, host_name, worker, profile, len(prompts)))
        else:
            warmed: dict = {}

            def warm() -> None:
                # Once it answers, before the router sends it anything: its first requests find their prompts cached.
                warmed.update(fleet_warm.warm_after_swap(record_path, host_name, worker, profile, prompts))
                fleet_warm.say(host_name, warmed)

            rotation = _put_back(
                router,
                host_name,
                worker,
                traffic_timeout,
                warm if profile is not None and not failed_gate else None,
                api_key=key,
            )
            record = _read_record(record_path)
            if warmed:
                record.setdefault("warm", {})[host_name] = warmed
            if failed_gate:
                record["failed"] = {"host": host_name, "gate": failed_gate, "rotation": rotation}
            elif host_name not in record.setdefault("done", []):
                record["done"].append(host_name)
            _write_record(record_path, record)
    finally:
        router.close()


def _warm_inputs(profile_file: str | None, warm_prompts: str | None):  # noqa: ANN202 - (Profile | None, prompts)
    """The host's new profile and the fleet's hot prompts, as the warm step reads them (files `fleet apply` wrote
    and validated)."""
    from kimik3_reconciler.fleet.hot_prompts import parse_hot_prompts
    from kimik3_reconciler.model.profile_source import parse_profile

    profile = parse_profile(Path(profile_file).read_text(), profile_file).profile if profile_file else None
    prompts = parse_hot_prompts(Path(warm_prompts).read_text(), warm_prompts) if warm_prompts else ()
    return profile, prompts


def _take_out(  # noqa: ANN001, PLR0913 - adapters.router_smg.SmgRouter
    router,
    host_name: str,
    worker: str,
    drain_timeout: float,
    min_serving: int,
    in_flight: Callable[[], int | None],
) -> None:
    """Out of the router once the others keep the floor (waited on for up to the drain timeout); then until its
    server runs no request (the drain timeout again, from its removal). Removed from smg (its part of the cache-aware
    tree purged; bench/router_hold.py: why a hold that keeps it is not used)."""
    listed = _leaving(router, host_name, worker, min_serving, drain_timeout)
    if listed is None:
        return
    router.remove(listed.id)
    # The drain's own budget, counted from the removal: one shared with the capacity wait left the host's replies
    # ~0 s after a long wait for the others, and a reply still running was cut when its server was replaced.
    deadline = time.monotonic() + drain_timeout
    router.wait_gone(listed.id, drain_timeout)
    _drained(host_name, in_flight, deadline)


def _leaving(router, host_name: str, worker: str, min_serving: int, drain_timeout: float):  # noqa: ANN001, ANN202 - SmgRouter -> RouterWorker | None
    """The worker as smg lists it, once `min_serving` others are in rotation (waited on for up to `drain_timeout`);
    None when smg does not list it. PlanError when the others stay too few."""
    deadline = time.monotonic() + drain_timeout
    if router.find(worker) is None:
        # Not serving through the router (a first rollout, a host a failure left out): taking it costs no capacity.
        click.echo(f"{host_name}: not in the router")
        return None
    while True:
        others = [w for w in router.workers() if w.in_rotation and w.url != worker.rstrip("/")]
        if len(others) >= min_serving:
            break
        if time.monotonic() > deadline:
            # The capacity floor: taking this host out would leave fewer serving than the policy allows.
            raise PlanError(
                f"{host_name}: only {len(others)} other host(s) in the router's rotation, the policy "
                f"keeps {min_serving} serving: not taken out (waited {drain_timeout:.0f} s)"
            )
        time.sleep(1)
    listed = router.find(worker)
    if listed is None:  # removed meanwhile (by hand, or smg dropped it as unhealthy)
        click.echo(f"{host_name}: no longer in the router")
    return listed


def _drained(host_name: str, in_flight: Callable[[], int | None], deadline: float) -> None:
    """Out of rotation is not idle: the requests smg sent there before run on (smg's own drain, DELETE, is a fixed 5 s
    wait in 1.13; a reply running past it was cut when `kimik3 apply` stopped the server: one 503 "failed to contact
    upstream" in a rollout under load). The server's own count says when it is idle; waited on until `deadline`."""
    try:
        running = _wait_idle(in_flight, deadline)
    except MetricsRefused as exc:
        click.echo(f"{host_name}: out of the router; its server refused /metrics ({exc}): waited the drain timeout")
        return
    if running == 0:
        click.echo(f"{host_name}: out of the router, its requests ended")
    elif running is None:
        click.echo(f"{host_name}: out of the router; its server does not say what it runs (its /metrics)")
    else:
        click.echo(
            f"{host_name}: out of the router; the drain timeout ended with {running} request(s) still on its server"
        )


HEALTH_RETRY_S = 30.0  # how long `router: in` tries the server's /health before leaving it out
IDLE_SETTLE_S = 1.0  # the server's count must stay 0 this long
DRAINING_S = 30.0  # how long `router: in` waits out smg's drain of a removal (5 s in smg 1.13) before adding it


class MetricsRefused(Exception):
    """The server refused its /metrics (401, 403): the key sent is not one it holds (none readable on the controller,
    or a rollout that changes the key: the old server holds the old one)."""


def _wait_idle(in_flight: Callable[[], int | None], deadline: float, step_s: float = 0.2) -> int | None:
    """The server's in-flight count once it stayed 0 for IDLE_SETTLE_S, or at the deadline; None when the server
    does not say. MetricsRefused once the deadline has passed, where the server refused to say."""
    idle_since = None
    while True:
        try:
            running = in_flight()
        except MetricsRefused:
            # Refused is not idle: it says nothing of the replies running there, so none is cut by going on early.
            time.sleep(max(0.0, deadline - time.monotonic()))
            raise
        if running is None:
            return None
        now = time.monotonic()
        # One 0 is not enough: llama-server reads 0 running and 0 queued for an instant when slots end and a queued
        # request is between the queues (seen: the step went on while a third reply had 34 s left to run).
        idle_since = (idle_since or now) if running == 0 else None
        if idle_since is not None and now - idle_since >= IDLE_SETTLE_S:
            return 0
        if now > deadline:
            return running
        time.sleep(step_s)


def server_in_flight(url: str, series: tuple[str, ...], api_key: str | None = None) -> Callable[[], int | None]:
    """Reads the requests the server at `url` holds: the sum of its `series` gauges on its /metrics (running and
    waiting: a request queued for a slot is in flight too), asked with the server's `api_key`; None when /metrics is
    refused, not 200 or has none of them (a stopped server, an API key the controller does not hold)."""
    import httpx

    from kimik3_reconciler.fleet.server_load import running_requests
    from kimik3_reconciler.model.api_keys import bearer

    def read() -> int | None:
        try:
            answer = httpx.get(f"{url}/metrics", timeout=3, headers=bearer(api_key))
        except httpx.TimeoutException:
            # llama-server answers /metrics between its decode steps: no answer in time is a server at work.
            return 1
        except httpx.HTTPError:
            return None
        if answer.status_code in (401, 403):
            raise MetricsRefused(f"HTTP {answer.status_code}")
        if answer.status_code != 200:
            return None
        counts = [running_requests(answer.text, name) for name in series]
        return None if all(c is None for c in counts) else sum(c or 0 for c in counts)

    return read


def _put_back(  # noqa: ANN001, PLR0913 - adapters.router_smg.SmgRouter
    router,
    host_name: str,
    worker: str,
    traffic_timeout: float,
    warm: Callable[[], None] | None = None,
    api_key: str | None = None,
) -> str:
    """'in rotation, sent traffic' | 'in rotation, no traffic within N s' | raises when it never gets in."""
    # A few tries, not one: a server that just passed the gates can miss one 3 s /health on a host under load (seen
    # on the shared 2-core rig: a verified host left out of the router and the rollout failed).
    deadline = time.monotonic() + HEALTH_RETRY_S
    while not _serves(worker):
        if time.monotonic() > deadline:
            raise StepError(
                f"{host_name}: its server at {worker} does not answer /health (for {HEALTH_RETRY_S:.0f} s): left out "
                "of the router"
            )
        time.sleep(1)
    if warm is not None:
        warm()
    before = _served_tokens(worker, api_key)
    listed = router.find(worker)
    if listed is not None and listed.status == "draining":
        # A removal smg is still draining (its fixed 5 s; `router: out` waited less, or a hand's DELETE): smg drops it
        # then, and one left to its health checks would never be added back (the wait below failing after 60 s).
        router.wait_gone(listed.id, DRAINING_S)
        listed = router.find(worker)
    if listed is None:  # removed by `router: out`; one still listed is left to its own health checks
        router.add(worker)
    router.wait_in_rotation(worker, timeout_s=60)
    deadline = time.monotonic() + traffic_timeout
    while time.monotonic() < deadline:
        now = _served_tokens(worker, api_key)
        if before is not None and now is not None and now > before:
            click.echo(f"{host_name}: back in rotation, the router sends it traffic")
            return "in rotation, sent traffic"
        time.sleep(0.5)
    click.echo(f"{host_name}: back in rotation; no request reached it within {traffic_timeout:.0f} s (idle fleet?)")
    return f"in rotation, no traffic within {traffic_timeout:.0f} s"


def router_rows(fleet) -> dict:  # noqa: ANN001 - fleet.Fleet -> {host name: fleet.report.RouterRow}
    """Each host as the router sees it (`fleet status`'s router column); {} when no router answers."""
    from kimik3_reconciler.adapters.router_smg import RouterError, SmgRouter
    from kimik3_reconciler.fleet.report import RouterRow

    url, metrics_url, _, _ = _router_urls(fleet)
    router = SmgRouter(url, metrics_url, timeout_s=3)
    try:
        listed = {w.url: w for w in router.workers()}
    except RouterError:
        return {}
    finally:
        router.close()
    rows = {}
    for fleet_host in fleet.hosts:
        seen = listed.get(worker_url(fleet_host))
        state = (
            "out"
            if seen is None
            else "in rotation"
            if seen.in_rotation
            else f"breaker {seen.breaker}"
            if seen.breaker == "open"
            else seen.status or "not healthy"
        )
        rows[fleet_host.name] = RouterRow(state)
    return rows


def register(group: click.Group) -> None:
    """Add `apply` and the hidden `router-step` to the `kimik3 fleet` group."""
    group.add_command(apply_cmd)
    group.add_command(router_step)
