"""Plan the metrics exporter as a systemd unit (issue 17: "a systemd unit next to it"), for a profile with both
`metrics:` and `systemd:`: `<unit>-metrics.service`, a helper's unit (planning/helper_unit.py) started after the
server's unit.
"""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.helpers import EXPORTER
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import UnitInstall
from kimik3_reconciler.model.unit_files import env_path
from kimik3_reconciler.planning.helper_unit import helper_install, plan_unit_of, render_helper_unit_text


def _after(profile: Profile) -> str:
    # After the server's unit: on boot its first scrape finds the container starting, not absent.
    return f"After=network-online.target {profile.unit_name}.service"


def render_exporter_install(profile: Profile, observed: Observed, docker_cli: str) -> UnitInstall:
    del docker_cli  # checked by the caller (the server's unit needs it); the exporter runs kimik3 only
    facts = observed.systemd
    assert facts is not None and profile.unit_name is not None
    unit = EXPORTER.unit_of(f"{profile.unit_name}.service")
    text = render_helper_unit_text(EXPORTER, profile.name, facts.kimik3_argv, env_path(unit), _after(profile))
    return helper_install(profile, observed, unit, text)


def plan_exporter_unit(profile: Profile, observed: Observed, wanted: ExporterConfig) -> tuple[Step, ...]:
    target = wanted.health_url.removesuffix("/healthz") + "/metrics"
    return plan_unit_of(EXPORTER, profile, observed, wanted, _after(profile), target)
