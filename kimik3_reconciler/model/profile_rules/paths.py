"""Rules about the host paths a profile names: written literally, never through a shell."""

from __future__ import annotations

import re
from collections.abc import Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import FieldPath, Finding, error


def local_paths(p: Profile) -> Iterator[tuple[FieldPath, str]]:
    """The host paths a profile names, where they are (URLs and hub files excepted)."""
    if p.model.cache_dir is not None:
        yield ("model", "cache_dir"), p.model.cache_dir
    if p.model.local_path is not None:
        yield ("model", "local_path"), p.model.local_path
    if p.build.archive is not None and "://" not in p.build.archive:
        yield ("build", "archive"), p.build.archive
    for i, patch in enumerate(p.build.patches):
        yield ("build", "patches", i), patch
    if p.serve.api_key_file is not None:
        yield ("serve", "api_key_file"), p.serve.api_key_file
    if p.serve.spec_draft is not None and p.serve.spec_draft.revision is None:
        yield ("serve", "spec_draft", "model"), p.serve.spec_draft.model
    for i, worker in enumerate(p.workers):
        for name in ("tls_dir", "cache_dir"):
            if (value := getattr(worker, name)) is not None:
                yield ("rpc", "workers", i, name), value


_SHELL_EXPANSION = re.compile(r"^~|\$(\{?[A-Za-z_][A-Za-z0-9_]*\}?)")


def paths_literal(p: Profile) -> Iterator[Finding]:
    for where, path in local_paths(p):
        if (found := _SHELL_EXPANSION.search(path)) is not None:
            # rule: paths-literal
            # No shell reads a profile: `~/hub` became a folder named '~' beside the profile (a cache_dir created
            # there, the model downloaded into it), `$HOME/key` a path with a '$' in it that does not exist.
            yield error(
                where,
                f"{found.group(0)!r} is not expanded: no shell reads a profile; write an absolute "
                "path or one relative to the profile's folder",
            )
