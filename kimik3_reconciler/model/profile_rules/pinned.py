"""Rules about pins: a branch, a tag or an image tag without its digest is legal in a profile (a person's choice,
resolved by `kimik3 pin`), and said as a warning, because plan and apply refuse it until pinned."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.model.pinning import unpinned, unpinned_message
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import Finding, warning


def pins(p: Profile) -> Iterator[Finding]:
    for pin in unpinned(p):
        # rule: pinned-to-serve
        # A branch or tag moves: two applies of one profile could serve other bytes; the commit (digest) is the pin.
        yield warning(pin.field, unpinned_message(pin, "FILE"))
