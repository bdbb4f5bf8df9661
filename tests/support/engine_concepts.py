"""Which modules outside engines/ name llama.cpp's concepts in code (issue 37's count): `llama`, `gguf`, `n_cpu_moe`,
`ubatch` in a name or a string literal, never in a comment or a docstring (tokenized, so a mention in prose does
not count). `python tests/support/engine_concepts.py` prints each module with its line count and the totals."""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

CONCEPT = re.compile(r"llama|gguf|n_cpu_moe|ubatch", re.IGNORECASE)
PACKAGE = Path(__file__).resolve().parents[2] / "kimik3_reconciler"
_SKIPPED = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
_WORDS = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def _is_docstring(tokens: list[tokenize.TokenInfo], at: int, before: tokenize.TokenInfo | None) -> bool:
    """A string that is a statement of its own: it opens the module, or follows a line's end or a block's colon,
    and the line ends right after it."""
    after = next((t for t in tokens[at + 1 :] if t.type not in (tokenize.COMMENT, tokenize.NL)), None)
    opens = (
        before is None or before.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) or before.string == ":"
    )
    return opens and after is not None and after.type in (tokenize.NEWLINE, tokenize.ENDMARKER)


def concept_lines(source: str) -> set[int]:
    """The lines whose code (names, string literals) names one of llama.cpp's concepts."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines: set[int] = set()
    before: tokenize.TokenInfo | None = None
    for at, token in enumerate(tokens):
        if token.type in _SKIPPED:
            continue
        if token.type == tokenize.STRING and _is_docstring(tokens, at, before):
            before = token
            continue
        if token.type in _WORDS and CONCEPT.search(token.string):
            lines.add(token.start[0])
        before = token
    return lines


def naming_modules(package: Path = PACKAGE) -> dict[str, int]:
    """Module (relative path) -> lines naming llama.cpp's concepts, for every module outside engines/."""
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] == "engines":
            continue
        lines = concept_lines(path.read_text(encoding="utf-8"))
        if lines:
            found[relative.as_posix()] = len(lines)
    return found


if __name__ == "__main__":
    modules = naming_modules(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)
    for name, count in modules.items():
        print(f"{count:4d}  {name}")
    print(f"{len(modules)} modules, {sum(modules.values())} lines")
