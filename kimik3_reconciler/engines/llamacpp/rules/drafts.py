"""Rules about speculative decoding: the DSpark draft, its device and patch, and --spec-type values."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import FieldPath, Finding, error, warning
from kimik3_reconciler.model.spec_draft import SPEC_LOSS_CONCURRENCY

DRAFT_ROOM_MIB = 9216  # seed 000: the DSpark draft needs ~9 GB free on its GPU, plus snapshots


def spec_draft(p: Profile) -> Iterator[Finding]:
    draft = p.serve.spec_draft
    if draft is None:
        return
    if draft.type == "draft-mtp":
        # rule: no-mtp-head
        # Seed 000 "Key facts": no MTP head in the checkpoint, so there is nothing for draft-mtp to draft with.
        yield error(
            ("serve", "spec_draft", "type"),
            "draft-mtp needs an MTP head and the Kimi-K3 checkpoint has "
            "none (seed 000): use draft-dspark (the RadixArk DSpark draft) or draft-simple",
        )
    if not p.build.patches:
        # rule: spec-draft-rollback
        # Seed 000: the draft pays only with the rollback patch in the image; with no patch at all there is
        # nothing to judge, so `validate` refuses it. Which patch is the rollback is judged by content when the
        # plan reads the files (engines/llamacpp/patch_roles.py).
        yield error(
            ("build", "patches"),
            "is empty, but serve.spec_draft needs the recurrent-state rollback patch "
            "(seed 000: kimi-k3-rs-rollback.patch; without it each draft step's state checkpoint costs more "
            "than the drafts save): list it here",
        )
    if p.serve.parallel >= SPEC_LOSS_CONCURRENCY:
        # rule: spec-draft-concurrency
        # Seed 000 measured concurrency, not slots: with 4 slots the draft gained +23 %/+72 % at one request at a
        # time (c1) and lost at 4 concurrent requests (c4: verify batches multiply MoE expert reads). The slots are
        # what lets 4 requests decode together; fewer than 4 caps every batch below the loss.
        yield warning(
            ("serve", "parallel"),
            f"{p.serve.parallel} slots let {p.serve.parallel} requests decode "
            f"together, and speculative decoding measured a loss at {SPEC_LOSS_CONCURRENCY} concurrent "
            "requests (seed 000: +23 %/+72 % at one request with 4 slots, a loss at c4): it pays for clients "
            f"that send fewer than {SPEC_LOSS_CONCURRENCY} at once; parallel <= {SPEC_LOSS_CONCURRENCY - 1} "
            "caps every batch below the loss (the interactive profile uses 2), and `kimik3 status --watch` "
            "says when the server decodes 4 or more with the draft",
        )
    if draft.device == "auto":
        return
    if p.gpus == "none":
        # rule: spec-draft-device
        # Seed 000: the draft sits on the GPU holding output.weight; with no GPU there is no such device.
        yield error(("serve", "spec_draft", "device"), "a CUDA draft device needs GPUs: use auto with gpus: none")
    elif isinstance(p.gpus, list) and int(draft.device.removeprefix("CUDA")) != len(p.gpus) - 1:
        # rule: spec-draft-device
        # Seed 000: the draft must sit on the GPU holding output.weight; anywhere else aborts in graph reservation.
        yield error(
            ("serve", "spec_draft", "device"),
            f"must be CUDA{len(p.gpus) - 1} (or auto): the last of the "
            f"{len(p.gpus)} GPUs holds the target's output.weight; elsewhere llama.cpp aborts",
        )


def _spec_types_written(p: Profile) -> Iterator[tuple[FieldPath, set[str]]]:
    """--spec-type values written past serve.spec_draft: in extra_args (the way to pick a draft-less method
    such as ngram-mod) or as LLAMA_ARG_SPEC_TYPE in serve.env."""
    args = p.serve.extra_args
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag.replace("_", "-") == "--spec-type":
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            yield ("serve", "extra_args", i), {t.strip() for t in value.split(",")}
    if "LLAMA_ARG_SPEC_TYPE" in p.serve.env:
        value = p.serve.env["LLAMA_ARG_SPEC_TYPE"]
        yield ("serve", "env", "LLAMA_ARG_SPEC_TYPE"), {t.strip() for t in value.split(",")}


def spec_type_args(p: Profile) -> Iterator[Finding]:
    for at, types in _spec_types_written(p):
        if "draft-mtp" in types:
            # rule: no-mtp-head
            # Seed 000 "Key facts": no MTP head in the checkpoint.
            yield error(
                at,
                "--spec-type draft-mtp: the Kimi-K3 checkpoint has no MTP head (seed 000); use "
                "serve.spec_draft with the DSpark draft",
            )
        if "ngram-mod" in types:
            # rule: ngram-mod-neutral
            # Seed 000 "Key facts": ngram-mod is ~ neutral on this model; the draft (DSpark) is what pays.
            yield warning(
                at,
                "--spec-type ngram-mod measured ~ neutral on Kimi-K3 (seed 000); the DSpark draft "
                "(serve.spec_draft) is what pays, at low concurrency",
            )
