"""The shipped profiles (profiles/*.yaml) pinned as `kimik3 pin` pins them (model/profile_edit.set_pins), with the
test's pins: the commits and digests the golden files (tests/golden/) were rendered with. The shipped files name
branches and tags (`revision: main`, `vllm/vllm-openai:kimi-k3`), which plan and render refuse until pinned; these
values are test data, never a hub's answer (`kimik3 validate` refuses them as made up)."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.model.pinning import pins
from kimik3_reconciler.model.profile_edit import set_pins
from kimik3_reconciler.model.profile_source import parse_profile

TEST_COMMITS = {
    "unsloth/Kimi-K3-GGUF": "0123456789abcdef0123456789abcdef01234567",
    "moonshotai/Kimi-K3": "89abcdef0123456789abcdef0123456789abcdef",
}
TEST_DIGEST = "sha256:" + "0" * 64


def pinned_text(path: Path, text: str | None = None) -> str:
    """`path`'s text (or `text`) with each unpinned revision and image tag pinned to the test's values."""
    text = path.read_text() if text is None else text
    found = [pin for pin in pins(parse_profile(text, path.name).profile) if not pin.pinned]
    values = {
        tuple(str(p) for p in pin.field): (
            TEST_COMMITS[pin.source] if pin.kind == "hub" else f"{pin.name}@{TEST_DIGEST}",
            pin.value if pin.kind == "hub" else None,
        )
        for pin in found
    }
    return set_pins(text, values) if values else text
