"""Plan the metrics exporter (issue 17): `kimik3 metrics-serve <profile>`, a process on the host next to the
server, converged like the container: started when absent, replaced when its fingerprint (the rendered
ExporterConfig) moves or it stops answering /healthz, stopped when `metrics:` goes or on destroy."""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.helpers import EXPORTER
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile, handover
from kimik3_reconciler.model.specs import ExporterStop, StopUnit
from kimik3_reconciler.planning.container_step import container_changes, plan_container
from kimik3_reconciler.planning.desired import Desired, changes
from kimik3_reconciler.planning.exporter_unit import plan_exporter_unit
from kimik3_reconciler.planning.helper_step import plan_detached, plan_helper_teardown
from kimik3_reconciler.planning.launch import bind_address, gpus_of, upstream_port

_LOOPBACK = "127.0.0.1"


def exporter_bind(profile: Profile, observed: Observed) -> str:
    """metrics.bind as an address: loopback by default (a node's Prometheus scrapes locally; a shared pool's
    other tenants need not read which quant, GPUs and load this profile has), tailscale or an IP literal."""
    bind = profile.metrics.bind if profile.metrics else "loopback"
    if bind == "loopback":
        return _LOOPBACK
    if bind == "tailscale":
        return observed.host.tailscale_ipv4 or _LOOPBACK
    return bind


def build_label(profile: Profile) -> str:
    build = profile.build
    return f"{build.source}-{build.effective_commit[:7]}-b{build.effective_build_number}-{build.variant}"


def render_exporter(desired: Desired, observed: Observed) -> ExporterConfig | None:
    """The exporter this profile wants on this host; None without a `metrics:` section."""
    profile, launch = desired.profile, desired.launch
    if profile.metrics is None:
        return None
    model = observed.model
    gpus, weights = gpus_of(profile), desired.engine.model_source.suffix
    in_exporter = upstream_port(profile) is not None and handover(profile) is None
    return ExporterConfig(
        profile=profile.name,
        # rule: metrics-labels-no-secrets
        # Labels are what a dashboard shows and any scraper stores: names and fingerprints only, never a path
        # of the key file or a token.
        labels={
            "profile": profile.name,
            "quant": model.quant or "",
            # a pulled image is named by its repository and tag (the digest is in the fingerprint)
            "build": build_label(profile)
            if desired.engine.image_source.kind == "build"
            else profile.image.ref.split("@")[0],
            "fingerprint": launch.fingerprint,
        },
        bind=exporter_bind(profile, observed),
        port=profile.metrics.port,
        container=launch.spec.name,
        server_url=launch.input.server_url,
        api_key_file=launch.input.serve.api_key_file,
        shards=tuple(model.host_path(f.path) for f in model.files if f.path.endswith(weights)),
        gpus=gpus if isinstance(gpus, str) else tuple(str(g) for g in gpus),
        quant=model.quant or "",
        repo=model.repo,
        revision=model.revision,
        # the smoke and quant gate records are a built image's; a pulled image has none
        image_fingerprint=desired.build.fingerprint if desired.build is not None else "",
        # rule: proxy-server-on-loopback
        # The proxy binds what serve.host resolves to, on serve.port; llama-server moved to loopback (launch.py).
        # With metrics.handover the proxy is the front, a process of its own (planning/front_step.py).
        proxy_bind=bind_address(profile, observed)[0] if in_exporter else None,
        proxy_port=profile.serve.port if in_exporter else None,
        engine=desired.engine.name,
    )


def plan_release_port(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Before the container: a running proxy that holds the port the new container binds (metrics.proxy turned
    off, or server_port moved onto it) is stopped first, else the server exits "couldn't bind"."""
    running = observed.exporter
    if running is None or not running.alive or not running.config.get("proxy_port"):
        return ()
    if running.config["proxy_port"] != desired.launch.input.serve.port:
        return ()
    if not container_changes(plan_container(desired, observed, planned)):
        return ()
    why = f"the exporter's proxy holds port {running.config['proxy_port']}, which {desired.engine.server} binds now: stop it first"
    if running.unit is not None:
        # A unit's process: stopping the pid alone, systemd would start it again; the metrics step restarts it.
        return (Step("metrics", running.unit, Action.DELETE, why, spec=StopUnit(running.unit)),)
    return (
        Step("metrics", desired.profile.name, Action.DELETE, why, spec=ExporterStop(desired.profile.name, running.pid)),
    )


def plan_exporter(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    wanted = render_exporter(desired, observed)
    # Stopped earlier in this plan (plan_release_port): what remains is to start the wanted one.
    running = None if changes(planned, ExporterStop) else observed.exporter
    if wanted is None:
        if running is None:
            return ()
        why = "metrics: removed from the profile" if running.alive else "record of an exporter that no longer runs"
        if running.unit is not None:
            why = f"metrics: removed from the profile (its unit {running.unit} goes above): delete its records"
        return (
            Step(
                "metrics",
                desired.profile.name,
                Action.DELETE,
                why,
                spec=ExporterStop(desired.profile.name, running.pid if running.alive else 0),
            ),
        )
    if desired.profile.systemd is not None:
        # Under `systemd:` the exporter is a unit next to the server's: systemd restarts it, not the next apply.
        return plan_exporter_unit(desired.profile, observed, wanted)
    if running is not None and running.unit is not None:
        # It ran as a unit, removed above with the `systemd:` section (plan_stale_units): start it detached.
        running = None
    proxy = (running.config.get("proxy_port") if running is not None else None) or wanted.proxy_port
    return plan_detached(
        EXPORTER,
        wanted,
        running,
        wanted.health_url.removesuffix("/healthz") + "/metrics",
        swap_ports=f"metrics.port and the proxy's serve.port {proxy}" if proxy else "metrics.port",
        started="",
        unanswered="/healthz does not answer",
        steady=f"serves fingerprint {wanted.fingerprint}",
    )


def plan_exporter_teardown(profile: Profile, observed: Observed) -> tuple[Step, ...]:
    """destroy: stop the exporter first (its scrape of a removed container would only log errors)."""
    return plan_helper_teardown(EXPORTER, profile.name, observed.exporter)
