"""Profile fields never become shell or cmake text (engines/llamacpp/build_flags.py): a value the profile schema would
refuse, slipped past it, is refused again where the cmake arguments are made."""

from __future__ import annotations

import pytest
from support.recorded_hosts import h200_host

from kimik3_reconciler.engines.llamacpp.build_flags import cmake_configure_args
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.profile_source import parse_profile

PROFILE = """
apiVersion: kimik3/v1
name: k3
model: {repo: org/k3, revision: 0123456789abcdef0123456789abcdef01234567, quant: UD-Q2_K_XL}
build: {cuda_architectures: ["90"]}
"""


def test_cmake_arguments_with_shell_characters_are_refused() -> None:
    profile = parse_profile(PROFILE).profile
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in cmake_configure_args(profile, h200_host(1))
    build = profile.build.model_copy(update={"cuda_architectures": ["90 $(touch /tmp/x)"]})
    with pytest.raises(PlanError, match="refusing cmake arguments with unsafe characters"):
        cmake_configure_args(profile.model_copy(update={"build": build}), h200_host(1))
