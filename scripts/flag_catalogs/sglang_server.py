"""Prints the flag catalogue of `python3 -m sglang.launch_server` from SGLang's own ServerArgs parser.
Run with the SGLang venv's python."""

import argparse
import importlib.metadata
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from catalog_common import catalog, emit
from sglang.srt.server_args import ServerArgs

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
emit(catalog(parser, "sglang.launch_server", importlib.metadata.version("sglang"), underscores=False))
