"""SGLang argvs through SGLang 0.5.23's own prepare_server_args; every mooncake_master /
mooncake_client flag against the real binaries' --help (mooncake-transfer-engine-non-cuda)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from roles import build_plan
from tests.engines.engine_venvs import VENVS, engine_bin, run_checker

pytestmark = pytest.mark.engines
KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))
TPU_LEADER = "kimi-k3-1-tpu-sglang-0.kimi-k3-1-tpu-sglang.llm-d"


def test_sglang_accepts_every_tpu_host_argv(tmp_path: Path) -> None:
    argvs = []
    for i in range(4):
        settings = Settings(
            pool="tpu", leader_address=TPU_LEADER, group_size=4, worker_index=i, tpu_worker_id=i
        )
        argvs.append(list(build_plan(settings, KIMI).engine.argv))
    negative = [[*argvs[0][:3], "--model-path", "/m", "--tp-size", "two"], [*argvs[0][:3], "--no-such-flag"]]
    results = run_checker("sglang", "sglang_parse.py", argvs + negative, tmp_path)
    assert [r["error"] for r in results[:4]] == [""] * 4
    assert [r["ok"] for r in results[4:]] == [False, False]  # the checker really runs SGLang's parser
    for i, result in enumerate(results[:4]):
        args = result["args"]
        assert (args["tp_size"], args["ep_size"], args["nnodes"], args["node_rank"]) == (32, 8, 4, i)
        assert args["dist_init_addr"] == f"{TPU_LEADER}:20000"
        assert (args["context_length"], args["page_size"], args["kv_cache_dtype"]) == (
            491520,
            128,
            "fp8_e4m3",
        )
        assert args["enable_hierarchical_cache"] is True and args["hicache_ratio"] == 2.0
        assert (args["grammar_backend"], args["tool_call_parser"], args["reasoning_parser"]) == (
            "none", "kimi_k3", "kimi_k3",
        )  # fmt: skip
        # API only on the leader: the others keep SGLang's loopback default for its stand-in health server.
        assert (args["host"], args["port"]) == (("0.0.0.0", 30000) if i == 0 else ("127.0.0.1", 30000))


def _gflags(binary: str) -> set[str]:
    """Flag names a gflags binary lists in --help (lines like `    -port (Port ...) type: int32`)."""
    proc = subprocess.run(
        [str(engine_bin("mooncake", binary)), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    names = set(re.findall(r"^\s+-(\w+) \(", proc.stdout + proc.stderr, flags=re.MULTILINE))
    assert len(names) > 20, (proc.returncode, proc.stderr[-2000:])
    return names


@pytest.mark.parametrize(("pool", "binary"), [("mooncake-master", "mooncake_master"),
                                              ("mooncake-donor", "mooncake_client")])  # fmt: skip
def test_every_mooncake_flag_is_known_to_the_binary(pool: str, binary: str) -> None:
    plan = build_plan(Settings(pool=pool, pod_ip="10.0.0.4"), KIMI)
    argv = plan.engine.argv
    assert argv[0] == binary
    planned = [token[2:].split("=", 1)[0] for token in argv[1:]]
    assert all(token.startswith("--") and "=" in token for token in argv[1:])  # gflags --name=value form
    known = _gflags(binary)
    # A planted unknown flag is the negative control: the same lookup must catch it.
    assert [flag for flag in [*planned, "no_such_flag"] if flag not in known] == ["no_such_flag"]


def test_engine_venvs_are_the_ones_install_engines_built() -> None:
    """The tests ran the versions scripts/install-engines.sh pins, not whatever a venv held."""
    script = (Path(__file__).parents[2] / "scripts" / "install-engines.sh").read_text()
    pinned = dict(re.findall(r'install_(\w+)\(\) \{\n(?:.*\n)*?\s+local stamp="([^"]+)"', script))
    assert set(pinned) == {"vllm", "vllm_033", "vllm_027", "vllm_tpu_027", "sglang", "sglang_0522",
                           "sglang_full", "mooncake", "pkgcheck"}  # fmt: skip
    installed = re.search(r"\|\| targets=\(([^)]*)\)", script)  # the default install: not vllm-tpu-027
    assert installed, "install-engines.sh names no default targets"
    for function, stamp in pinned.items():
        if function.replace("_", "-") not in installed.group(1).split():
            continue  # built only when named (11 GB), so no test runs it
        venv = function.replace("_", "-")  # install_sglang_full builds .venvs/sglang-full
        assert (VENVS / venv / ".stamp").read_text().strip() == stamp, venv
