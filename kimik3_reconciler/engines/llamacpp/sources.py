"""Where a build's llama.cpp source archive comes from: the pin's GitHub archive or an override."""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile


def source_archive(profile: Profile, observed: Observed) -> tuple[str, str | None]:
    """(location, sha256 or None). A commit archive is content-addressed by the commit itself."""
    if observed.inputs.archive_location:
        return observed.inputs.archive_location, observed.inputs.archive_sha256
    return profile.build.pin.archive_url(profile.build.effective_commit), profile.build.archive_sha256
