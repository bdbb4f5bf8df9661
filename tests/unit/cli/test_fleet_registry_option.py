"""`fleet plan|apply --registry` takes ADDRESS:PORT as Docker names a registry in an image reference: anything else
is refused (exit 2) before a host is asked. A URL used to pass, and the first host's push failed halfway through the
rollout (the host already rolled, the rest not)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kimik3_reconciler.cli import main


@pytest.mark.parametrize("registry", ["http://10.0.0.5:5000", "10.0.0.5", "reg:99999", "reg:5000/kimik3", "{{ x }}:1"])
@pytest.mark.parametrize("command", ["plan", "apply"])
def test_a_registry_that_is_not_address_and_port_is_refused_before_any_host(command: str, registry: str) -> None:
    result = CliRunner().invoke(main, ["fleet", command, "--registry", registry, "no-such-fleet.yaml"])
    assert result.exit_code == 2 and "is not ADDRESS:PORT" in result.output, result.output


@pytest.mark.parametrize("registry", ["10.0.0.5:5000", "registry.example:443", "[fd00::5]:5000", "localhost:5000"])
def test_an_address_and_port_passes(registry: str) -> None:
    from kimik3_reconciler.cli.options import RegistryAddress

    assert RegistryAddress().convert(registry, None, None) == registry
