"""A DOCKER_HOST / --docker-host a newcomer mistypes: named, at once, with what to write (held-back review: a
bogus scheme was exit 1 "docker: Invalid bind address protocol", and a path that is no socket was retried for
90 s as a restarting daemon)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from kimik3_reconciler.adapters.docker_engine import DockerEngine, _unreachable, check_docker_url
from kimik3_reconciler.errors import InputError, PermanentError, TransientError


@pytest.mark.parametrize(
    "url",
    [
        "unix:///var/run/docker.sock",
        "tcp://10.0.0.2:2376",
        "ssh://me@gpu2",
        "http://127.0.0.1:2375",
        "127.0.0.1:2375",
        "npipe:////./pipe/docker_engine",
    ],
)
def test_docker_urls_the_sdk_takes_pass(url: str) -> None:
    check_docker_url(url)


@pytest.mark.parametrize("url", ["bogus://x", "/var/run/docker.sock", "localhost", "docker.sock", "fd://"])
def test_a_url_no_daemon_can_be_at_is_input_naming_the_variable(url: str) -> None:
    with pytest.raises(
        InputError,
        match=r"^DOCKER_HOST \(or --docker-host\) .* is not a docker daemon URL: write "
        r"unix:///var/run/docker.sock",
    ) as refused:
        check_docker_url(url)
    assert refused.value.exit_code == 2


def test_the_engine_checks_the_url_before_the_sdk_sees_it() -> None:
    with pytest.raises(InputError, match="'bogus://x' is not a docker daemon URL"):
        DockerEngine("bogus://x").client  # noqa: B018 - the property connects


def test_a_refused_path_that_is_no_socket_fails_at_once(tmp_path: Path) -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    error = _unreachable(refused, True, False, f"unix://{tmp_path}")
    assert isinstance(error, PermanentError) and f"unix://{tmp_path} is not a socket" in str(error)
    # a real socket path that refuses is a daemon restarting: retried as before
    assert isinstance(_unreachable(refused, True, False, "unix:///nonexistent/docker.sock"), TransientError)
