"""Rules that keep secrets out of a profile (it lives in a GitOps repo), and the environment variables that would
select GPUs or set a server's options behind the profile (each registered engine's `server_env` judges those its
server reads)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib import import_module
from urllib.parse import urlsplit

from kimik3_reconciler.model.engine_names import ENGINES
from kimik3_reconciler.model.hub_endpoint import TOKEN_POLICY, token_may_go_to
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import NEVER_SECRETS, FieldPath, Finding, error, warning

# The container's GPUs are the profile's `gpus` (Docker's device request): these would select or renumber them
# behind it (the nvidia runtime reads NVIDIA_VISIBLE_DEVICES; CUDA renumbers what CUDA_VISIBLE_DEVICES lists).
GPU_SELECTION_ENV = frozenset({"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
_SECRET_ENV = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", *(n for e in ENGINES.values() for n in e.secret_env)})
_SECRET_SUFFIXES = ("_TOKEN", "_KEY", "_SECRET", "_PASSWORD")
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{30,}")
_NO_SECRETS = f"{NEVER_SECRETS}: use serve.api_key_file / the environment"


def starred(text: str, environ: Mapping[str, str]) -> str:
    """`text` with the environment's secrets (HF_TOKEN, the API key) and any hf_… token as ***: for text kimik3
    did not write itself (a foreign exception's message and traceback), which may quote a header or a file."""
    for name in sorted(_SECRET_ENV):
        value = environ.get(name, "").strip()
        if len(value) >= 8:  # a short value (a stray "1") would star ordinary words, and is no credential
            text = text.replace(value, "***")
    return _HF_TOKEN.sub("***", text)


def endpoint(p: Profile) -> Iterator[Finding]:
    endpoint = p.model.endpoint
    if endpoint is not None and not token_may_go_to(endpoint):
        # rule: hub-token-https
        # A token over plain http to another host travels in clear text: the hub adapters withhold it.
        yield warning(
            ("model", "endpoint"),
            f"plain http to a non-loopback host: {TOKEN_POLICY}, so this hub "
            "gets no token (a private or gated repo will be refused); use https",
        )


def secrets(p: Profile) -> Iterator[Finding]:
    # rule: no-secrets
    # PROFILE.md: profiles live in a GitOps repo; tokens and API keys come from files or the environment.
    for key, value in p.serve.env.items():
        upper = key.upper()
        if upper in _SECRET_ENV or upper.endswith(_SECRET_SUFFIXES):
            # rule: no-secrets
            # A variable named like a secret holds one: env values show in `docker inspect`.
            yield error(("serve", "env", key), f"{key} names a secret; {_NO_SECRETS}")
        elif _HF_TOKEN.search(value):
            # rule: no-secrets
            # A token under an innocent name is still a token.
            yield error(("serve", "env", key), f"the value looks like a Hugging Face token; {_NO_SECRETS}")
        elif upper in GPU_SELECTION_ENV:
            # rule: owned-env
            # The container's GPUs are `gpus` (Docker's device request); this would select or renumber them behind it.
            yield error(
                ("serve", "env", key),
                f"{key} selects GPUs behind the profile: use gpus (the container gets exactly those)",
            )
        else:
            yield from _server_env(key)
    for i, arg in enumerate(p.serve.extra_args):
        if _HF_TOKEN.search(arg):
            # rule: no-secrets
            # argv shows in `docker inspect` and `ps`.
            yield error(("serve", "extra_args", i), f"looks like a Hugging Face token; {_NO_SECRETS}")
    for where, url in _urls(p):
        if urlsplit(url).password is not None:
            # rule: no-secrets
            # A password in a URL is a secret in the profile, and errors and plans print the URL they could not reach.
            yield error(
                where,
                f"the URL holds a password (user:password@); {NEVER_SECRETS}: a hub mirror takes "
                "HF_TOKEN from the environment, a Docker host its ssh keys or tls_dir",
            )
    key_file = p.serve.api_key_file
    if key_file is not None and _looks_like_a_key(key_file):
        # rule: no-secrets
        # serve.api_key_file is the path of a file holding the key; a key written here is in the GitOps repo (and
        # plan's "not found" would print it).
        yield error(
            ("serve", "api_key_file"),
            f"looks like an API key, not a path; {NEVER_SECRETS}: write the "
            "key into a file (chmod 600) and give its path here",
        )


def _server_env(key: str) -> Iterator[Finding]:
    """What each registered engine's server makes of serve.env's `key` (its entry's `server_env`), the first that
    reads it. Asked of every engine, whichever the profile names, as kimik3 has always judged these variables."""
    for entry in ENGINES.values():
        if entry.server_env:
            finding = import_module(entry.server_env).env_finding(key)
            if finding is not None:
                yield finding
                return


def _urls(p: Profile) -> Iterator[tuple[FieldPath, str]]:
    """The URLs a profile holds, where they are."""
    if p.model.endpoint is not None:
        yield ("model", "endpoint"), p.model.endpoint
    if p.build.archive is not None and "://" in p.build.archive:
        yield ("build", "archive"), p.build.archive
    for i, worker in enumerate(p.workers):
        yield ("rpc", "workers", i, "docker"), worker.docker


_KEY_PREFIX = re.compile(r"(sk|pk|rk|api|key)[-_][A-Za-z0-9_-]{16,}")


def _looks_like_a_key(value: str) -> bool:
    """A token-shaped string rather than a file path: an hf_ token, an sk-... key, or 24+ characters of letters
    and digits with no path separator or file suffix."""
    if _HF_TOKEN.search(value) or _KEY_PREFIX.fullmatch(value):
        return True
    return (
        "/" not in value
        and "." not in value
        and len(value) >= 24
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
    )
