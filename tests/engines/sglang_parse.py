"""Runs INSIDE the SGLang parser venv: parses argvs with sglang.srt.server_args.prepare_server_args,
what `python3 -m sglang.launch_server` calls first.

stdin: JSON list of argvs (each starting with python3 -m sglang.launch_server). stdout: JSON results.
"""

import contextlib
import io
import json
import sys

from sglang.srt.server_args import prepare_server_args

SHOW = (
    "model_path",
    "served_model_name",
    "tp_size",
    "pp_size",
    "ep_size",
    "nnodes",
    "node_rank",
    "dist_init_addr",
    "context_length",
    "page_size",
    "kv_cache_dtype",
    "enable_hierarchical_cache",
    "hicache_ratio",
    "grammar_backend",
    "tool_call_parser",
    "reasoning_parser",
    "host",
    "port",
)


def check(argv):
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"], argv[:3]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(argv[3:])
    except SystemExit as exc:
        lines = [
            line for line in err.getvalue().splitlines() if "error" in line
        ] or err.getvalue().splitlines()
        return {"ok": False, "error": f"exit {exc.code}: {lines[-1] if lines else ''}"}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "error": "", "args": {k: getattr(args, k) for k in SHOW}}


if __name__ == "__main__":
    print(json.dumps([check(argv) for argv in json.load(sys.stdin)], default=str))
