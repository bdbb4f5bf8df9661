"""What the commands read and write: profiles, and plans saved by `plan -out` (told apart by content)."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from functools import cache
from pathlib import Path

from kimik3_reconciler.adapters.atomic_files import write_atomically
from kimik3_reconciler.cli import profile_cache
from kimik3_reconciler.errors import InputError, LocalFileError, StalePlan
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.plan_file import SavedPlan, read_saved_plan, write_saved_plan

_PACKAGE = Path(__file__).resolve().parents[1]


# A profile is a few KiB and a saved plan some tens: reading stops here, so `kimik3 validate /dev/zero` or a
# mistaken multi-GB file is refused at once instead of filling the memory of a shared host.
MAX_INPUT_BYTES = 4 << 20


# Descriptors the caller opened and hands over by name (`validate /dev/stdin < k3.yaml`, bash's `<(...)` as
# /dev/fd/63): a pipe there has its writer already, so it is read as it is.
_HANDED_OVER = re.compile(r"/dev/stdin|/dev/fd/\d+|/proc/self/fd/\d+")
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _read_bounded(path: str) -> bytes:
    if _HANDED_OVER.fullmatch(path):
        with open(path, "rb") as f:
            return _bounded(path, f.read(MAX_INPUT_BYTES + 1))
    # O_NONBLOCK: opening a FIFO with no writer would wait forever (`kimik3 validate fifo` hung); a regular file
    # reads as ever, and anything else is refused before a byte is read.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise InputError(
                f"{path}: is {what}: kimik3 reads a profile or saved plan from a regular file (or /dev/stdin)"
            )
        return _bounded(path, f.read(MAX_INPUT_BYTES + 1))


def _bounded(path: str, data: bytes) -> bytes:
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(
            f"{path}: larger than {MAX_INPUT_BYTES >> 20} MiB, so not a kimik3 profile or saved plan "
            "(a profile is a few KiB): check the file name"
        )
    return data


def read_text(path: str) -> str:
    try:
        return _read_bounded(path).decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}): save the profile as UTF-8") from exc


def load(path: str, cached: bool = False, pinned: bool = True, text: str | None = None) -> LoadedProfile:
    """The profile in `path` (`text`: its content, read already); `cached`: a text validated before comes from the
    profile cache (in the cache dir); `pinned`: refuse a profile that names a branch, a tag or an image tag without
    its digest (check_pinned)."""
    text = read_text(path) if text is None else text
    saved = read_saved_plan(text, path)
    if saved is not None:  # only apply executes a saved plan; the other commands take its profile
        raise InputError(
            f"{path} is a saved plan (made {saved.created}): `kimik3 apply {path}` executes it; "
            f"this command takes the profile ({saved.profile_source})"
        )
    loaded = parse_text(text, path, cached)
    return check_pinned(loaded) if pinned else loaded


def check_pinned(loaded: LoadedProfile) -> LoadedProfile:
    """`loaded`, or a ProfileError (exit 2, file:line: field) naming each unpinned field and `kimik3 pin`."""
    from kimik3_reconciler.model.pinning import unpinned, unpinned_message

    # rule: pinned-to-serve
    # What plan shows and apply serves must not move between them (or between two hosts): a branch or tag is
    # resolved once, by `kimik3 pin`, into the profile, never silently at each run.
    return _refuse_pins(loaded, unpinned(loaded.profile), lambda pin: unpinned_message(pin, loaded.source))


def check_not_made_up(loaded: LoadedProfile) -> LoadedProfile:
    """`loaded`, or a ProfileError naming each pin whose commit or digest is a placeholder (model/pinning.py)."""
    from kimik3_reconciler.model.pinning import made_up_message, pins

    # rule: pins-not-made-up
    # A placeholder hash (0123456789abcdef…, sha256:000…) validates as a commit or digest and fails only at the hub
    # or the registry, on the GPU host: validate (CI) says so at once, with the line.
    return _refuse_pins(
        loaded,
        tuple(pin for pin in pins(loaded.profile) if pin.made_up),
        lambda pin: made_up_message(pin, loaded.source),
    )


def _refuse_pins(loaded: LoadedProfile, refused: tuple, message) -> LoadedProfile:  # noqa: ANN001 - Pin -> str
    from kimik3_reconciler.errors import ProfileError, ProfileProblem
    from kimik3_reconciler.model.loaded_profile import line_for, render_path

    if refused:
        raise ProfileError(
            [
                ProfileProblem(loaded.source, line_for(pin.field, loaded.lines), render_path(pin.field), message(pin))
                for pin in refused
            ]
        )
    return loaded


def parse_text(text: str, source: str, cached: bool = False) -> LoadedProfile:
    """Profile text, validated (model/profile_source.py) or, `cached`, from the cache of earlier validations
    of the same text by the same kimik3 (cli/profile_cache.py, in adapters/cache_files.cache_dir())."""
    if cached:
        from kimik3_reconciler.adapters.cache_files import cache_dir

        return profile_cache.load(cache_dir(), text, source)
    from kimik3_reconciler.model.profile_source import parse_profile  # pydantic and yaml: a cache miss only

    return parse_profile(text, source=source)


def profile_text_now(path: str) -> str | None:
    """The profile file a saved plan was made from, as it reads now (None: gone or unreadable)."""
    try:
        return _read_bounded(path).decode("utf-8")
    except (OSError, UnicodeDecodeError, InputError):
        return None


def _is_a_saved_plan(target: Path) -> bool:
    try:
        return read_saved_plan(_read_bounded(str(target)).decode("utf-8"), str(target)) is not None
    except (OSError, UnicodeDecodeError, InputError):
        return False


def check_plan_target(path: str) -> None:
    """What `-out PLAN` may write, checked before the host is observed: a new file in an existing folder, or an
    older saved plan. A missing folder used to surface after the whole plan as exit 8 with a hint about
    KIMIK3_STATE_DIR and the profile's paths, neither of which was the problem."""
    target = Path(path)
    if target.is_symlink():
        raise InputError(
            f"{path} is a symlink: refusing to replace it (plan -out writes a new file or replaces an "
            "older saved plan); name the file itself or another path"
        )
    if target.exists() and not (target.is_file() and _is_a_saved_plan(target)):
        raise InputError(
            f"{path} exists and is not a kimik3 saved plan: refusing to replace it (plan -out writes a "
            "new file or replaces an older saved plan); choose another path"
        )
    folder = target.parent
    if not folder.is_dir():
        # exit 8, README's code for a missing local path; what was wrong is -out's folder, so say that.
        raise LocalFileError(
            f"{folder}: -out {path}: this folder does not exist (or is not a folder): create it, or "
            "choose another -out path [errno ENOENT]"
        )


def write_plan(path: str, saved: SavedPlan) -> None:
    """Atomically: a half-written plan file must never be applied. Only a new file or an older saved plan is
    replaced: `-out profiles/k3.yaml` (a slip of the hand) or `-out /dev/full` would otherwise be renamed over."""
    target = Path(path)
    check_plan_target(path)  # again: the target may have changed while the plan was made
    try:
        # A fresh temp name (O_EXCL, write_atomically), never a fixed one a symlink could be planted at; mode 0644: a
        # plan holds no secret and CI jobs of other users read it; a missing folder is the user's path, not made.
        write_atomically(target, write_saved_plan(saved), mode=0o644, make_folder=False)
    except OSError as exc:
        # The disk or the folder failed, not the input: exit 8 names the path and what to do (README's table).
        raise LocalFileError.from_os_error(OSError(exc.errno, exc.strerror, path)) from exc  # -out's path, not tmp


# What an installed kimik3 is made of (pyproject's package data, and the code): an editor's swap file or a
# patch's *.orig left in a development checkout must not make a saved plan stale.
_SHIPPED_SUFFIXES = (".py", ".patch")
_SHIPPED_NAMES = ("gate_text.txt",)
_SHIPPED_PREFIX = "Dockerfile"  # an engine's Dockerfile.<engine> (the image it builds)


def _is_shipped(path: Path) -> bool:
    return (
        path.is_file()
        and "__pycache__" not in path.parts
        and (path.suffix in _SHIPPED_SUFFIXES or path.name in _SHIPPED_NAMES or path.name.startswith(_SHIPPED_PREFIX))
    )


@cache
def kimik3_identity() -> str:
    """This kimik3: its version and a digest of every file of the package (code, Dockerfile, patches, gate text).
    A development checkout changes without a version bump; a saved plan records this and only this kimik3
    executes it (as Terraform refuses a plan made by another Terraform)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("kimik3-reconciler")
    except PackageNotFoundError:
        release = "unreleased"
    digest = hashlib.sha256()
    for path in sorted(p for p in _PACKAGE.rglob("*") if _is_shipped(p)):
        digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{release} (code {digest.hexdigest()[:16]})"


def check_made_by(saved: SavedPlan, source: str) -> None:
    """A plan another kimik3 made is stale (exit 7), before the lock or any observation: its payloads, its
    fingerprints and the executors that would run them are that kimik3's, not this one's. One this kimik3 made
    without the content digests it writes into every plan had them removed: edited, also exit 7."""
    if saved.made_by == kimik3_identity() and not saved.sealed:  # this kimik3 writes the digests: they were removed
        raise StalePlan(
            f"the saved plan {source} was edited after kimik3 wrote it (its content digests were removed): "
            f"nothing was changed. kimik3 applies a saved plan only as it was made: plan again (kimik3 plan "
            f"{saved.profile_source} -out PLAN)",
            ("edited: content_digest removed",),
        )
    if saved.made_by != kimik3_identity():
        made = f"kimik3 {saved.made_by}" if saved.made_by else "an older kimik3 (the plan names none)"
        raise StalePlan(
            f"the saved plan {source} (made {saved.created}) was made by {made}; this is kimik3 "
            f"{kimik3_identity()}: nothing was changed. Plan again with this kimik3 (kimik3 plan "
            f"{saved.profile_source} -out PLAN)",
            (f"{made} → kimik3 {kimik3_identity()}",),
        )
