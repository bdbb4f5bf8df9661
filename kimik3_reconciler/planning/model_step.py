"""Plan the model: are all files of repo@revision/quant verified in the HF cache?"""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.model_files import manifest_key
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ModelDownload
from kimik3_reconciler.planning.units import gib


def plan_model(profile: Profile, observed: Observed) -> Step:
    model = observed.model
    target = f"{model.repo}@{model.revision[:12]}/{model.quant}"
    spec = ModelDownload(
        repo=model.repo, revision=model.revision, quant=model.quant, endpoint=profile.model.endpoint,
        cache_dir=model.cache_dir, files=model.files, missing=model.missing, manifest_key=manifest_key(profile),
    )
    if model.complete:
        return Step("model", target, Action.NOOP,
                    f"all {len(model.files)} files verified in the cache ({gib(model.total_bytes)})", spec=spec)
    return Step("model", target, Action.CREATE,
                f"{len(model.missing)} of {len(model.files)} files missing from the cache",
                spec=spec, cost=f"{gib(model.missing_bytes)} to fetch")
