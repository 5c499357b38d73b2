"""Runs INSIDE the vLLM engine venv: feeds argvs to vLLM's own `vllm` CLI entrypoint
(vllm.entrypoints.cli.main.main) with only the final launch functions replaced by recorders.

So everything vLLM does before it starts serving runs for real: the parser, pydantic validation of
--kv-transfer-config / --kv-events-config / --quantization-config, validate_parsed_serve_args, the
load-balancing mode selection in `vllm serve`, and the DP supervisor's own argument validation and
per-rank child arguments. Deep checks add what vLLM only checks once a GPU engine is built
(kv-cache dtype, load format, speculative-config fields).

Version notes: the `vllm` entrypoint (vllm.entrypoints.cli.main) and the DP supervisor module
(vllm.entrypoints.launchers.dp_supervisor) sit at the same paths in 0.32 and 0.33; only the serve-arg
helpers moved (launchers/cli_args -> common/cli_args in 0.33), and going through main() avoids
importing them by path at all.

stdin: JSON list of argvs, each starting with "vllm". stdout: JSON list of results.
Dependency-free on the launcher so it runs in vLLM's interpreter.
"""

import contextlib
import dataclasses
import io
import json
import sys
import types
from typing import get_args

import vllm.entrypoints.cli.launch as launch_mod
import vllm.entrypoints.cli.serve as serve_mod
import vllm.entrypoints.launchers.dp_supervisor as dp_mod
from vllm.entrypoints.cli.main import main as vllm_main

SHOW = (
    "model_tag",
    "port",
    "nnodes",
    "node_rank",
    "master_addr",
    "headless",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "data_parallel_size_local",
    "data_parallel_start_rank",
    "data_parallel_address",
    "data_parallel_rpc_port",
    "data_parallel_multi_port_external_lb",
    "data_parallel_supervisor_port",
    "kv_cache_dtype",
    "load_format",
    "served_model_name",
    "max_num_seqs",
    "enable_prefix_caching",
    "api_server_count",
    "speculative_config",
)


class Launched(Exception):
    """Raised by a recorder instead of starting a server."""

    def __init__(self, path, args, children=()):
        self.path, self.namespace, self.children = path, args, list(children)


def _dp_supervisor(args):
    dp_mod.validate_multi_port_external_lb_args(args)
    children = []
    for local in range(args.data_parallel_size_local):
        child = dp_mod._build_vllm_dp_server_args(args, local)
        children.append({"port": child.port, "data_parallel_rank": child.data_parallel_rank})
    raise Launched("dp-supervisor", args, children)


def _recorder(path):
    def record(args, *rest, **kw):
        raise Launched(path, args)

    return record


def _coroutine_recorder(path):
    def make(args, *rest, **kw):
        return (path, args)

    return make


def _run(pair):
    raise Launched(*pair)


serve_mod.run_dp_supervisor = _dp_supervisor
serve_mod.run_headless = _recorder("headless")
serve_mod.run_multi_api_server = _recorder("multi-api-server")
serve_mod.run_server = _coroutine_recorder("api-server")
serve_mod.uvloop = types.SimpleNamespace(run=_run)
launch_mod.run_launch_fastapi = _coroutine_recorder("render")
launch_mod.uvloop = types.SimpleNamespace(run=_run)


def deep_checks(args):
    from vllm.config.cache import CacheDType
    from vllm.config.speculative import SpeculativeConfig
    from vllm.model_executor.model_loader import LoadFormats

    problems = []
    if args.kv_cache_dtype not in get_args(CacheDType):
        problems.append(f"--kv-cache-dtype {args.kv_cache_dtype!r} is not one of vLLM's CacheDType values")
    if args.load_format not in get_args(LoadFormats):
        problems.append(f"--load-format {args.load_format!r} is not one of vLLM's LoadFormats")
    spec = args.speculative_config or {}
    unknown = set(spec) - set(SpeculativeConfig.__dataclass_fields__)
    if unknown:
        problems.append(f"--speculative-config has unknown keys {sorted(unknown)}")
    return problems


def dump(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value


def check(argv):
    sys.argv = list(argv)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            vllm_main()
    except Launched as launched:
        args = launched.namespace
        shown = {k: dump(getattr(args, k, None)) for k in SHOW}
        shown["kv_transfer_config"] = dump(args.kv_transfer_config)
        shown["kv_events_config"] = dump(args.kv_events_config)
        shown["quantization_config"] = str(getattr(args, "quantization_config", None))
        problems = deep_checks(args)
        return {
            "ok": not problems,
            "error": "; ".join(problems),
            "path": launched.path,
            "children": launched.children,
            "args": json.loads(json.dumps(shown, default=str)),
        }
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if "error" in line.lower()]
        return {"ok": False, "error": f"exit {exc.code}: {' | '.join(lines[:3])}"}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": False, "error": "vLLM returned without launching anything"}


if __name__ == "__main__":
    print(json.dumps([check(argv) for argv in json.load(sys.stdin)]))
