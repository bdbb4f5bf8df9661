"""kimik3's KIMIK3_* environment knobs (model/env_knobs.py): one parser for all of them; a bad value is refused
naming the variable, exit 2, before any command observes or changes anything; the code reads no KIMIK3_*
variable past that parser; docs/operations.md lists every knob."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

from kimik3_reconciler import adapters, cli
from kimik3_reconciler.cli.options import lock_timeout
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.env_knobs import KNOBS, knob_value, refuse_bad_knobs

ROOT = Path(__file__).parents[3]
BAD = {  # knob -> values it must refuse (each a mistake seen or likely: a zero, a unit, a pasted newline...)
    "KIMIK3_DOWNLOAD_WORKERS": ["0", "-1", "four", "4.0", " 4", "+4", "4_0"],
    "KIMIK3_LOCK_TIMEOUT": ["soon", "-5s", "inf"],
    "KIMIK3_SYSTEMCTL_PREFIX": ["docker exec 'sd", "   "],
    "KIMIK3_STATE_DIR": [" /srv/k3", "/srv/k3\n", "/srv/\tk3"],
    "KIMIK3_CACHE_DIR": ["/tmp/c\n"],
    "KIMIK3_DOCKERFILE": ["Dockerfile ", "\n"],
    "KIMIK3_SYSTEMD_ROOT": ["/\x1b"],
    "KIMIK3_HOST_LOCK": [" off", "/run/lock/k.lock\n"],
    "KIMIK3_LOG_FILE": ["\t"],
}


def test_every_knob_has_bad_values_here() -> None:
    assert set(BAD) == set(KNOBS)


@pytest.mark.parametrize(("name", "raw"), [(n, v) for n, values in BAD.items() for v in values])
def test_a_bad_value_is_refused_naming_the_variable(name: str, raw: str) -> None:
    with pytest.raises(InputError, match=re.escape(f"{name}={raw!r} refused: ")):
        knob_value(name, {name: raw})
    with pytest.raises(InputError, match=re.escape(f"{name}={raw!r}")):
        refuse_bad_knobs({name: raw, "KIMIK3_UNRELATED": "x"})


def test_good_values_parse_and_empty_is_unset() -> None:
    assert knob_value("KIMIK3_DOWNLOAD_WORKERS", {"KIMIK3_DOWNLOAD_WORKERS": "12"}) == 12
    assert knob_value("KIMIK3_DOWNLOAD_WORKERS", {"KIMIK3_DOWNLOAD_WORKERS": ""}, 4) == 4
    assert knob_value("KIMIK3_DOWNLOAD_WORKERS", {}, 4) == 4
    assert knob_value("KIMIK3_LOCK_TIMEOUT", {"KIMIK3_LOCK_TIMEOUT": "1h30m"}) == 5400
    assert knob_value("KIMIK3_SYSTEMCTL_PREFIX", {"KIMIK3_SYSTEMCTL_PREFIX": "docker exec 'my box'"}) == (
        "docker",
        "exec",
        "my box",
    )
    assert knob_value("KIMIK3_HOST_LOCK", {"KIMIK3_HOST_LOCK": "OFF"}, Path("/d")) is None
    assert knob_value("KIMIK3_HOST_LOCK", {}, Path("/d")) == Path("/d")
    assert knob_value("KIMIK3_STATE_DIR", {"KIMIK3_STATE_DIR": "rel/state dir"}) == Path("rel/state dir")
    refuse_bad_knobs({})


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_cli_refuses_a_bad_knob_before_touching_anything(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2 with the variable named, for a reading command and a changing one alike: no adapter made (so
    nothing observed, locked or changed), no state dir, no cache dir."""

    def no_ports(*_: object, **__: object) -> None:
        raise AssertionError("a refused environment must not get as far as the host's adapters")

    monkeypatch.setattr(adapters, "real_ports", no_ports)
    (tmp_path / "profile.yaml").write_text(FAKE_PROFILE)
    env = {"KIMIK3_STATE_DIR": str(tmp_path / "state"), "KIMIK3_CACHE_DIR": str(tmp_path / "cache"), name: BAD[name][0]}
    for command in (["apply", str(tmp_path / "profile.yaml")], ["validate", str(tmp_path / "profile.yaml")]):
        result = CliRunner().invoke(cli.main, command, env=env)
        assert result.exit_code == 2, result.output
        assert f"error: {name}={BAD[name][0]!r} refused: " in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "state").exists() and not (tmp_path / "cache").exists()


def test_the_cli_takes_its_knobs_from_the_parser_and_flags_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "src.tar.gz").write_bytes(b"source")
    (work / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    (work / "profile.yaml").write_text(FAKE_PROFILE)
    ports, _ = fake_ports(
        FakeHub("org/k3", FAKE_REVISION, {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"x"}, tmp_path / "hub")
    )
    seen: list[tuple] = []

    def real_ports(*args: object) -> object:
        seen.append(args)
        return ports

    monkeypatch.setattr(adapters, "real_ports", real_ports)
    env = {
        "KIMIK3_STATE_DIR": str(tmp_path / "state"),
        "KIMIK3_DOCKERFILE": str(work / "Dockerfile.llamacpp"),
        "KIMIK3_SYSTEMD_ROOT": str(tmp_path / "root"),
        "KIMIK3_SYSTEMCTL_PREFIX": "docker exec 'my box'",
    }
    plan = ["plan", str(work / "profile.yaml")]
    assert CliRunner().invoke(cli.main, plan, env=env).exit_code == 0
    assert seen[-1] == (tmp_path / "state", None, str(tmp_path / "root"), ("docker", "exec", "my box"))
    flags = ["--state-dir", str(tmp_path / "s2"), "--systemd-root", "/", "--systemctl-prefix", "ssh h"]
    assert CliRunner().invoke(cli.main, [*flags, *plan], env=env).exit_code == 0
    assert seen[-1] == (tmp_path / "s2", None, "/", ("ssh", "h"))
    assert CliRunner().invoke(cli.main, ["--systemctl-prefix", "", *plan], env=env).exit_code == 0
    assert seen[-1][3] == ()  # given empty: systemctl here, whatever the environment says
    refused = CliRunner().invoke(cli.main, ["--systemctl-prefix", "ssh 'h", *plan], env=env)
    assert refused.exit_code == 2 and "No closing quotation" in refused.output


def test_the_lock_timeout_knob_and_its_flag() -> None:
    @click.command()
    @lock_timeout
    def probe(lock_timeout: float) -> None:
        click.echo(repr(lock_timeout))

    assert CliRunner().invoke(probe, [], env={"KIMIK3_LOCK_TIMEOUT": None}).output.strip() == "0.0"
    assert CliRunner().invoke(probe, [], env={"KIMIK3_LOCK_TIMEOUT": "5m"}).output.strip() == "300.0"
    assert (
        CliRunner().invoke(probe, ["--lock-timeout", "2s"], env={"KIMIK3_LOCK_TIMEOUT": "5m"}).output.strip() == "2.0"
    )


def test_the_code_reads_knobs_only_through_the_parser() -> None:
    """No `os.environ.get("KIMIK3_...")`, `os.getenv`, `environ["KIMIK3_..."]` or click `envvar="KIMIK3_..."`
    outside model/env_knobs.py: each would be a knob with its own (or no) checks, as KIMIK3_DOWNLOAD_WORKERS was."""
    read = re.compile(r"""(environ\.get\(|getenv\(|environ\[|envvar=)\s*["']KIMIK3_""")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "kimik3_reconciler").rglob("*.py"))
        if path.name != "env_knobs.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if read.search(line)
    ]
    assert offenders == []
    named = set(
        re.findall(
            r'knob_value\(\s*"(KIMIK3_[A-Z_]+)"',
            "\n".join(p.read_text() for p in (ROOT / "kimik3_reconciler").rglob("*.py")),
        )
    )
    assert named <= set(KNOBS)


def test_docs_list_every_knob() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Environment knobs") :]
    section = section[: section.index("\n## ", 1)]
    assert {name for name in KNOBS if f"`{name}`" not in section} == set()
