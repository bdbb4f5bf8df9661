"""The speculative draft's rollback patch is recognised by what it changes, never by its file name:
the diff parser (observe/local_inputs.py) on real files, the judgement (engines/llamacpp/patch_roles.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kimik3_reconciler.engines.llamacpp.patch_roles import rollback_patch, rollback_requirement
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.local_inputs import collect_inputs, parse_unified_diff

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SHAPED = FIXTURES / "patches" / "recurrent-rollback-shaped.patch"
OTHER = FIXTURES / "server-log-line.patch"  # a real patch of llama.cpp's server: not a rollback


def profile_with(patch_name: str, spec_draft: bool = True):
    draft = "\n  spec_draft: {model: draft.gguf}" if spec_draft else ""
    return parse_profile(f"""
apiVersion: kimik3/v1
name: k3
model: {{repo: org/k3, revision: {"ab" * 20}, quant: UD-IQ2_XXS}}
build: {{patches: [patches/{patch_name}]}}
gpus: [0, 1]
serve:
  parallel: 2{draft}
""").profile


def inputs_for(tmp_path: Path, source: Path, name: str, spec_draft: bool = True):
    from support.fakes import MemoryState

    (tmp_path / "patches").mkdir(exist_ok=True)
    shutil.copy(source, tmp_path / "patches" / name)
    (tmp_path / "draft.gguf").write_bytes(b"GGUF")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    profile = profile_with(name, spec_draft)
    return profile, collect_inputs(profile, tmp_path, tmp_path / "Dockerfile.llamacpp", MemoryState())


def test_the_parser_reads_which_files_a_diff_changes_and_what_it_adds() -> None:
    header, source = parse_unified_diff(SHAPED.read_text())
    assert header.path == "src/llama-memory-recurrent.h" and header.removed == 0 and len(header.added) == 3
    assert source.path == "src/llama-memory-recurrent.cpp" and source.removed == 1
    assert source.added[-1].strip() == "return rollback_to(seq_id, p0);"
    # A deleted file has no new path; a line that only looks like a header inside a hunk is content.
    deleted = parse_unified_diff("--- a/x.c\n+++ /dev/null\n@@ -1 +0,0 @@\n-int x;\n")
    assert deleted == ()
    hunk = parse_unified_diff("--- a/y.c\n+++ b/y.c\n@@ -1 +1,2 @@\n int y;\n+++ not a header;\n")
    assert [(f.path, f.added) for f in hunk] == [("y.c", ("++ not a header;",))]


def test_the_real_one_renamed_is_recognised_by_content(tmp_path: Path) -> None:
    profile, inputs = inputs_for(tmp_path, SHAPED, "0003-state-undo.patch")
    found, refusal = rollback_requirement(profile, inputs.patches)
    assert refusal is None and found is not None
    assert str(found) == (
        "0003-state-undo.patch (recognised by content: adds rollback code (rollback_to, "
        "n_rollback) to src/llama-memory-recurrent.h +3/-0, src/llama-memory-recurrent.cpp +2/-1)"
    )


def test_a_file_named_like_it_with_other_content_is_refused(tmp_path: Path) -> None:
    profile, inputs = inputs_for(tmp_path, OTHER, "kimi-k3-rs-rollback.patch")
    found, refusal = rollback_requirement(profile, inputs.patches)
    assert found is None and refusal is not None
    assert "none does (kimi-k3-rs-rollback.patch changes tools/server/server.cpp)" in refusal
    assert "src/llama-memory-recurrent.cpp" in refusal


def test_no_draft_no_judgement_and_a_rollback_elsewhere_does_not_count(tmp_path: Path) -> None:
    profile, inputs = inputs_for(tmp_path, OTHER, "x.patch", spec_draft=False)
    assert rollback_requirement(profile, inputs.patches) == (None, None)
    # "rollback" in a file that is not the recurrent-state memory (the server's own checkpoints) is not it.
    elsewhere = parse_unified_diff(
        "--- a/tools/server/server.cpp\n+++ b/tools/server/server.cpp\n@@ -1 +1 @@\n+    // rollback the slot\n"
    )
    from kimik3_reconciler.model.facts import PatchFact

    assert rollback_patch((PatchFact(name="p", path="/p", sha256="0" * 64, files=elsewhere),)) is None


def test_the_plan_refuses_before_any_step(tmp_path: Path) -> None:
    from support.observed import observed

    from kimik3_reconciler.planning import plan

    profile, inputs = inputs_for(tmp_path, OTHER, "kimi-k3-rs-rollback.patch")
    with pytest.raises(PlanError, match="needs the recurrent-state rollback patch"):
        plan(profile, observed(profile, inputs=inputs))


def test_a_rollback_said_only_in_comments_or_strings_is_not_the_patch() -> None:
    """Review of issue 14: any added line mentioning "rollback" counted; only code naming one does now."""
    from kimik3_reconciler.engines.llamacpp.patch_roles import code_of
    from kimik3_reconciler.model.facts import PatchFact

    def patch(*added: str) -> PatchFact:
        body = "".join(f"+{line}\n" for line in added)
        files = parse_unified_diff(
            "--- a/src/llama-memory-recurrent.cpp\n+++ b/src/llama-memory-recurrent.cpp\n"
            f"@@ -1 +1,{len(added)} @@\n{body}"
        )
        return PatchFact(name="rs.patch", path="/rs.patch", sha256="0" * 64, files=files)

    for comment_only in (
        ("    // TODO: rollback someday",),
        ("    /* rollback later */",),
        ("     * rollback: see below",),
        ('    LLAMA_LOG_INFO("rollback not supported\\n");',),
    ):
        assert rollback_patch((patch(*comment_only),)) is None, comment_only
    assert code_of("    return rollback_to(seq_id, p0); // rollback") == "    return rollback_to(seq_id, p0); "
    found = rollback_patch((patch("    // bounded", "    bool seq_rollback(llama_seq_id id);"),))
    assert found is not None and found.evidence == (
        "adds rollback code (seq_rollback) to src/llama-memory-recurrent.cpp +2/-0"
    )
    _, refusal = rollback_requirement(profile_with("rs.patch"), (patch("    // TODO: rollback someday"),))
    assert (
        refusal is not None
        and (
            "none does (rs.patch changes src/llama-memory-recurrent.cpp (rollback only in "
            "comments or strings there, no code))"
        )
        in refusal
    )


def test_the_plan_time_refusal_names_build_patches_with_the_profile_file_and_line(tmp_path: Path) -> None:
    """Review of issue 14: the refusal was a bare PlanError; the orchestrator now adds file:line of the field."""
    from support.observed import observed

    from kimik3_reconciler.orchestrator import located
    from kimik3_reconciler.planning import plan

    profile, inputs = inputs_for(tmp_path, OTHER, "kimi-k3-rs-rollback.patch")
    text = (
        f"apiVersion: kimik3/v1\nname: k3\nmodel: {{repo: org/k3, revision: {'ab' * 20}, quant: UD-IQ2_XXS}}\n"
        "build:\n  patches: [patches/kimi-k3-rs-rollback.patch]\ngpus: [0, 1]\nserve:\n  parallel: 2\n"
        "  spec_draft: {model: draft.gguf}\n"
    )
    loaded = parse_profile(text, source="interactive.yaml")
    with pytest.raises(PlanError) as refused, located(loaded):
        plan(profile, observed(profile, inputs=inputs))
    assert refused.value.fields == (("build", "patches"),)
    assert str(refused.value).endswith("\n  at interactive.yaml:5: build.patches")
    assert "needs the recurrent-state rollback patch" in str(refused.value)
