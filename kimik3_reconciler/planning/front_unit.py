"""Plan the front (metrics.handover) as a systemd unit for a profile with `systemd:` (issue 38 item 12), as the
exporter is one: `<unit>-front.service`, a helper's unit (planning/helper_unit.py), so the public port is served
again after a crash or a reboot without an apply; the stale-unit planner keeps it while the profile has
`metrics.handover`. A restart of the unit is systemd's stop, then start: the public port is closed for that second
(no socket handover between a unit's old and new process).
"""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.helpers import FRONT
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.planning.helper_unit import plan_unit_of, render_helper_unit_text

# Not after the server's unit: the front holds the public port whatever runs behind it (a 502 while nothing does).
_AFTER = "After=network-online.target"


def render_front_unit_text(profile: str, argv: tuple[str, ...], env_file: str) -> str:
    return render_helper_unit_text(FRONT, profile, argv, env_file, _AFTER)


def plan_front_unit(profile: Profile, observed: Observed, wanted: FrontConfig) -> tuple[Step, ...]:
    return plan_unit_of(FRONT, profile, observed, wanted, _AFTER, wanted.control_url.split("/.kimik3")[0])
