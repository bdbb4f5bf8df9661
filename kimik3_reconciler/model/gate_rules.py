"""When the quant gate applies, and the reference quant as a profile of its own (pure)."""

from __future__ import annotations

from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.profile import Profile


def gate_applies(profile: Profile) -> bool:
    """gate.quant is configured and the quant is neither vetted in the catalog nor the reference."""
    gate = profile.gate.quant
    if gate is None or profile.model.quant == gate.reference_quant:
        return False
    info = catalog.lookup(profile.model.quant)
    return not (info is not None and info.vetted)


def reference_profile(profile: Profile) -> Profile:
    """The same profile with the reference quant (and no mmproj): its files, manifest and layout."""
    assert profile.gate.quant is not None
    model = profile.model.model_copy(update={"quant": profile.gate.quant.reference_quant, "mmproj": None})
    return profile.model_copy(update={"model": model})
