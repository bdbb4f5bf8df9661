"""Rules about the quant: its name, vetted or refused on this hardware, REAP770's cost to code."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import Finding, error, warning


def quant(p: Profile) -> Iterator[Finding]:
    quant, info = p.model.quant, p.quant_info
    spelled = [name for name in catalog.CATALOG if name.lower() == quant.lower() and name != quant]
    if spelled:
        # rule: quant-name-case
        # The Hub's folder names are case-sensitive: 'ud-q2_k_xl' is not found there (exit 6 after the hub round trip).
        yield error(
            ("model", "quant"),
            f"{quant} is not a folder of the repo (names are case-sensitive): did you mean '{spelled[0]}'?",
        )
        return
    if info is not None and info.refused:
        # rule: tq2-refused
        # Seed 000: UD-TQ2_0 produces corrupted logits on these GPUs.
        yield error(("model", "quant"), f"{quant} is refused: {info.refused}")
        return
    if info is not None and info.vetted:
        return
    if catalog.is_iq_or_tq(quant) and p.gate.quant is None:
        # rule: unvetted-iq-tq
        # Seed 000: any new IQ/TQ quant must pass the gate before it is served (a broken sm_120 kernel scores KLD >> 1).
        yield error(
            ("model", "quant"),
            f"{quant} is an IQ/TQ quant not vetted on this hardware: "
            "it must pass the quant gate first (configure gate.quant)",
        )
    elif p.gate.quant is None:
        # rule: unvetted-quant
        # Seed 000: other quants are mechanically supported but unvetted.
        yield warning(("model", "quant"), f"{quant} is not vetted on this hardware; consider gate.quant")


def local_source(p: Profile) -> Iterator[Finding]:
    """A quant made on the user's host is served from its file, never looked up in the repo."""
    info, local = p.quant_info, p.model.local_path
    if info is not None and info.made_locally and local is None:
        # rule: made-locally-needs-local-path
        # Seed 000: REAP770 is made locally (14 % of the experts sliced out of UD-Q2_K_XL into one 697 GiB file):
        # the repo has no such folder, so a hub listing would fail after the round trip (exit 6).
        yield error(
            ("model", "local_path"),
            f"{p.model.quant} is made locally, not a folder of {p.model.repo} (seed 000): "
            "name the GGUF file (or the folder of its shards) you made; nothing is downloaded for it",
        )
    if local is not None and p.model.mmproj is not None:
        # rule: local-path-no-mmproj
        # The projector is a file of the repo: serving it beside a local model would still need the hub.
        yield error(
            ("model", "mmproj"),
            "is a file of the repo, not served with model.local_path: drop it (or serve the hub's quant)",
        )


def reap(p: Profile) -> Iterator[Finding]:
    if "REAP" in p.model.quant:
        # rule: reap770-code
        # Seed 000: REAP770's expert cut keeps KLD near the reference but costs code generation.
        yield warning(
            ("model", "quant"),
            f"{p.model.quant}: HumanEval 86.6 % / MBPP 85.5 % (vs 95.7 / 97.0 for "
            "UD-IQ2_XXS): the expert cut damages code generation; not the default for coding use",
        )
