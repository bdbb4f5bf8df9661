"""What the commands read and write: profiles, and plans saved by `plan -out` (told apart by content)."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.cli import profile_cache
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.plan_file import SavedPlan, read_saved_plan, write_saved_plan


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}): save the profile as UTF-8") from exc


def load(path: str, state_dir: str | Path | None = None) -> LoadedProfile:
    """The profile in `path`; with `state_dir`, a text validated before comes from the profile cache."""
    text = read_text(path)
    saved = read_saved_plan(text, path)
    if saved is not None:  # only apply executes a saved plan; the other commands take its profile
        raise InputError(f"{path} is a saved plan (made {saved.created}): `kimik3 apply {path}` executes it; "
                         f"this command takes the profile ({saved.profile_source})")
    return parse_text(text, path, state_dir)


def parse_text(text: str, source: str, state_dir: str | Path | None = None) -> LoadedProfile:
    """Profile text, validated (model/profile_source.py) or, with `state_dir`, from the cache of earlier
    validations of the same text by the same kimik3 (cli/profile_cache.py)."""
    if state_dir is not None:
        return profile_cache.load(Path(state_dir), text, source)
    from kimik3_reconciler.model.profile_source import parse_profile  # pydantic and yaml: a cache miss only

    return parse_profile(text, source=source)


def profile_text_now(path: str) -> str | None:
    """The profile file a saved plan was made from, as it reads now (None: gone or unreadable)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def write_plan(path: str, saved: SavedPlan) -> None:
    """Atomically: a half-written plan file must never be applied."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.kimik3-tmp")
    try:
        tmp.write_text(write_saved_plan(saved), encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        raise InputError(f"cannot write the plan to {path}: {exc.strerror}") from exc
