"""Where the Hugging Face token may go: a pure decision on a hub URL, shared by the profile rules
(which warn) and the hub adapters (which withhold the token)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

TOKEN_POLICY = "the HF token is sent only over https or to a loopback mirror"


def is_loopback_host(host: str) -> bool:
    """True for `localhost` and loopback address literals (127.0.0.0/8, ::1); names are not resolved."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_may_go_to(url: str) -> bool:
    """True when a request to `url` may carry the HF token: https, or plain http to this host's loopback.
    Plain http to any other host would put the token on the network in clear text."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and is_loopback_host(parts.hostname or "")


def shown(url: str) -> str:
    """`url` as it may be printed: credentials in it (user:password@) masked; errors and logs name the hub so."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"***@{host}").geturl()


def masked(text: str, url: str) -> str:
    """`text` (an error from a library that prints the URL it asked) with `url`'s credentials masked."""
    userinfo = urlsplit(url).netloc.rpartition("@")[0]
    return text.replace(f"{userinfo}@", "***@") if userinfo else text
