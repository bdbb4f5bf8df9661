"""Local files the profile names (Dockerfile, patches, source archive, API key file): hashed; patches are also
parsed (which files they change, the lines they add); the API key file is read only to see whether llama-server
would find a usable key in it (model/api_keys.py): only why not is kept (the launch's planner refuses it); its keys
are never kept, logged or put in a fact."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.api_keys import key_file_problem
from kimik3_reconciler.model.builtin_patches import builtin_patches_for
from kimik3_reconciler.model.facts import LocalInputs, PatchedFile, PatchFact
from kimik3_reconciler.model.loaded_profile import render_path
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.records import archive_record_key, file_hash_key
from kimik3_reconciler.observe.local_model import stat_memo
from kimik3_reconciler.ports import CachePort, StatePort


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_sha256(path: Path, cache: CachePort | None, rehash: bool = False) -> str:
    """A local source archive's sha256, re-read only when its stat fingerprint moved since it was last hashed
    here (the same policy as verified model files: any write moves ctime); `rehash` (`--verify`) always reads.
    The memo is in the cache dir (never the state dir: a plan writes no state), written only when the file did
    not move while it was read; no cache (None) or an unwritable one only means the next plan hashes again."""
    key = file_hash_key(str(path))
    before = stat_memo(os.stat(path))
    memo = None if rehash or cache is None else cache.read(key)
    if memo and memo.get("path") == str(path) and memo.get("stat") == before and isinstance(memo.get("sha256"), str):
        return memo["sha256"]
    sha = sha256_file(path)
    if cache is not None and stat_memo(os.stat(path)) == before:
        cache.write(key, {"path": str(path), "stat": before, "sha256": sha})
    return sha


def parse_unified_diff(text: str) -> tuple[PatchedFile, ...]:
    """The files a unified diff (git or diff -u) changes, with the lines each adds: what the planner
    judges a patch by (engines/llamacpp/patch_roles.py), whatever the file is called."""
    files: list[PatchedFile] = []
    path: str | None = None
    added: list[str] = []
    removed, previous = 0, ""

    def close() -> None:
        if path is not None:
            files.append(PatchedFile(path=path, added=tuple(added), removed=removed))

    for line in text.splitlines():
        if line.startswith("+++ ") and previous.startswith("--- "):  # a file header (`---` then `+++`)
            close()
            target = line[4:].split("\t")[0].strip()
            path, added, removed = (None if target == "/dev/null" else target.removeprefix("b/")), [], 0
        elif path is not None and line.startswith("+"):
            added.append(line[1:])
        elif path is not None and line.startswith("-") and not line.startswith("--- "):
            removed += 1
        previous = line
    close()
    return tuple(files)


PATCH_DIR = Path(__file__).resolve().parents[1] / "patches"


def patch_fact(path: Path) -> PatchFact:
    # Small text files: read whole, so the planner can say what a patch changes, not trust its name.
    files = parse_unified_diff(path.read_bytes().decode("utf-8", errors="replace"))
    return PatchFact(name=path.name, path=str(path), sha256=sha256_file(path), files=files)


def builtin_patch_facts(profile: Profile) -> tuple[PatchFact, ...]:
    """kimik3's own patches this profile's image gets (its variant, build.builtin_patches), hashed: their bytes
    are in the image fingerprint, so a changed patch rebuilds."""
    return tuple(
        patch_fact(PATCH_DIR / p.file)
        for p in builtin_patches_for(profile.build.variant, profile.build.builtin_patches)
    )


def _existing(base_dir: Path, raw: str, field: tuple[str | int, ...]) -> Path:
    path = (base_dir / raw).resolve()
    if not path.is_file():
        # A directory or a device (/dev/zero) exists: "not found" sent users looking for a typo.
        what = "is a directory" if path.is_dir() else "is not a regular file" if path.exists() else "not found"
        raise InputError(f"{render_path(field)}: {raw} {what} (resolved to {path})", (field,))
    return path


def _check_folder(base_dir: Path, raw: str, field: tuple[str | int, ...]) -> None:
    """A folder kimik3 creates if missing (model.cache_dir): refused when it, or the nearest part of it that exists,
    is not a directory. Was: `cache_dir: weights.gguf` (a file) planned a download, and apply then failed at
    mkdir with exit 8 instead of plan naming the field with exit 2."""
    path = (base_dir / raw).resolve()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "" if existing == path else f" ({existing} is not a directory)"
        raise InputError(f"{render_path(field)}: {raw} is not a directory{where} (resolved to {path})", (field,))


_MAX_KEY_FILE_BYTES = 64 * 1024  # a key file holds a few lines; more is the wrong file (and is not read whole)


def _api_key_file(base_dir: Path, raw: str, server: str) -> tuple[Path, str | None]:
    """The key file's path, and why `server` (the engine's) would find no key in it that kimik3's clients can send (None:
    it would). Only recorded here: observation serves every command, and destroy/status/prune must still work
    on the deployment whose key file is wrong; the launch's planner refuses it (planning/launch.py)."""
    field = ("serve", "api_key_file")
    path = _existing(base_dir, raw, field)
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        # An unreadable file (EACCES) is the profile's input, not kimik3's failure: name the field (exit 2).
        raise InputError(f"{render_path(field)}: {raw} cannot be read: {exc.strerror or exc}", (field,)) from None
    try:
        problem = (
            f"is larger than {_MAX_KEY_FILE_BYTES // 1024} KiB: not a key file"
            if len(data) > _MAX_KEY_FILE_BYTES
            else key_file_problem(data.decode("utf-8"), server)
        )
    except UnicodeDecodeError:
        problem = "is not UTF-8 text: not a key file"
    return path, problem


def _check_recorded(profile: Profile, archive_sha: str, state: StatePort) -> None:
    """A pin's source must not change under it: the sha256 of its first use is the reference."""
    build = profile.build
    record = state.read(archive_record_key(build.source, build.effective_commit))
    if record is None or record.get("sha256") == archive_sha or build.archive_sha256 == archive_sha:
        return  # first use, unchanged, or the profile explicitly pins the new archive
    raise InputError(
        f"build.archive: the source archive of {build.source}@{build.effective_commit[:7]} changed since its "
        f"first use (recorded sha256 {record.get('sha256')}, now {archive_sha}). A pinned source must not "
        f"change; if this archive is intended, pin it with build.archive_sha256: {archive_sha}",
        (("build", "archive"),),
    )


def _is_url(raw: str) -> bool:
    return raw.startswith(("http://", "https://"))


def collect_inputs(
    profile: Profile,
    base_dir: Path,
    dockerfile: Path,
    state: StatePort,
    rehash: bool = False,
    cache: CachePort | None = None,
) -> LocalInputs:
    if not dockerfile.is_file():
        raise InputError(f"Dockerfile not found: {dockerfile}")
    patches = []
    builtin = builtin_patch_facts(profile)
    seen = {p.sha256: f"kimik3's built-in {p.name}" for p in builtin}
    for i, raw in enumerate(profile.build.patches):
        fact = patch_fact(_existing(base_dir, raw, ("build", "patches", i)))
        if fact.sha256 in seen:
            # The build applies each patch with `patch --forward`: the same change a second time is "previously
            # applied" and fails the image build ("PATCH FAILED") minutes in, after plan said ok.
            raise InputError(
                f"build.patches[{i}]: {raw} is the same patch as {seen[fact.sha256]}: it would be "
                "applied twice and fail the build; list it once",
                (("build", "patches", i),),
            )
        seen[fact.sha256] = f"build.patches[{i}] ({raw})"
        patches.append(fact)
    archive_location, archive_sha = None, None
    raw_archive = profile.build.archive
    if raw_archive and _is_url(raw_archive):
        archive_location, archive_sha = raw_archive, profile.build.archive_sha256
    elif raw_archive:
        path = _existing(base_dir, raw_archive, ("build", "archive"))
        archive_location, archive_sha = str(path), archive_sha256(path, cache, rehash)
        if profile.build.archive_sha256 and profile.build.archive_sha256 != archive_sha:
            raise InputError(
                f"build.archive: {raw_archive} has sha256 {archive_sha}, "
                f"but build.archive_sha256 pins {profile.build.archive_sha256}",
                (("build", "archive"), ("build", "archive_sha256")),
            )
        _check_recorded(profile, archive_sha, state)
    api_key, api_key_problem = None, None
    if profile.serve.api_key_file:
        # Read for a usable key here; the key itself never reaches the planner, a fact or a log: only why not.
        server = engine_for(profile.engine).server
        key_path, api_key_problem = _api_key_file(base_dir, profile.serve.api_key_file, server)
        api_key = str(key_path)
    if profile.model.cache_dir:
        _check_folder(base_dir, profile.model.cache_dir, ("model", "cache_dir"))
    draft = None
    spec_draft = profile.serve.spec_draft
    if spec_draft is not None and spec_draft.revision is None:
        draft = str(_existing(base_dir, spec_draft.model, ("serve", "spec_draft", "model")))
    return LocalInputs(
        dockerfile_path=str(dockerfile),
        dockerfile_sha256=sha256_file(dockerfile),
        patches=tuple(patches),
        builtin_patches=builtin,
        archive_location=archive_location,
        archive_sha256=archive_sha,
        api_key_file=api_key,
        api_key_problem=api_key_problem,
        draft_model=draft,
    )
