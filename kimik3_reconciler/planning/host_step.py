"""Plan the host's kernel settings (issue 27 item 5): with `host.prepare`, the sysctl.d file that persists what
seed 000 requires (kernel.numa_balancing = 0) is written and loaded like any other change, and a host that has
both is a NOOP. Without it nothing is planned: the host gate checks the live value and refuses (rule
numa-balancing)."""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.model.facts import HostFacts, Observed
from kimik3_reconciler.model.host_settings import SEED_SETTINGS, SYSCTL_FILE, parse_sysctl, sysctl_text
from kimik3_reconciler.model.plan import Action, DiffItem, Step, flat_diff
from kimik3_reconciler.model.specs import HostSettings
from kimik3_reconciler.planning.desired import Desired


def module_said(host: HostFacts) -> str:
    """What the plan says of the NVIDIA kernel module (the host gate judges it: rule nvidia-open-module)."""
    if host.nvidia_module is None:
        return "NVIDIA kernel module: none loaded" if host.gpu_probe == "no-driver" else ""
    return f"NVIDIA kernel module: {host.nvidia_module}" + (
        " (seed 000 requires the open one)" if host.nvidia_module == "proprietary" else ""
    )


def plan_host(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    if not desired.profile.host.prepare:
        return ()
    step = _plan_host(desired, observed)
    overrides = observed.host_settings.overridden_by if observed.host_settings is not None else ()
    # A later sysctl.d file that sets the same key wins at boot: the host comes up with the other value, and a
    # server started at boot (a boot-enabled unit) runs under it until the next apply loads kimik3's file again.
    wanted = dict(SEED_SETTINGS)
    warnings = tuple(
        f"{path} sets {key} = {value} and a boot reads it after {SYSCTL_FILE}: every boot turns it "
        f"back (seed 000 needs {wanted[key]}); remove that line"
        for path, key, value in overrides
    )
    return (replace(step, warnings=step.warnings + warnings),)


def _plan_host(desired: Desired, observed: Observed) -> Step:
    # rule: host-prepare
    # Seed 000 step 5 names numa_balancing=0 a host prerequisite, "required, not optional"; a declarative tool
    # converges it as it converges the server (pyinfra's and Ansible's sysctl do): persisted, so a reboot keeps it.
    fact = observed.host_settings
    text = sysctl_text(SEED_SETTINGS)
    written = fact.file_text if fact is not None else None
    live = fact.live if fact is not None else {}
    module = module_said(observed.host)
    tail = f"; {module}" if module else ""
    spec = HostSettings(SYSCTL_FILE, text, SEED_SETTINGS)
    settings = ", ".join(f"{k} = {v}" for k, v in SEED_SETTINGS)
    if written is None:
        return Step(
            "host",
            SYSCTL_FILE,
            Action.CREATE,
            f"persist {settings} (seed 000) and load it{tail}",
            diff=tuple(DiffItem(k, live.get(k), v) for k, v in SEED_SETTINGS),
            spec=spec,
        )
    if written != text:
        return Step(
            "host",
            SYSCTL_FILE,
            Action.UPDATE,
            f"the file differs from what kimik3 writes: rewrite it and load it{tail}",
            diff=flat_diff(parse_sysctl(written), dict(SEED_SETTINGS)),
            spec=spec,
        )
    moved = {k: v for k, v in SEED_SETTINGS if live.get(k) != v}
    if moved:
        # Set back since the load (by hand, or a later sysctl.d file at boot): the file is right, load it again.
        return Step(
            "host",
            SYSCTL_FILE,
            Action.UPDATE,
            f"the live value moved since the file was loaded: load it again{tail}",
            diff=tuple(DiffItem(k, live.get(k), v) for k, v in moved.items()),
            spec=HostSettings(SYSCTL_FILE, text, SEED_SETTINGS, write=False),
        )
    return Step("host", SYSCTL_FILE, Action.NOOP, f"{settings}, persisted in {SYSCTL_FILE}{tail}", spec=spec)
