"""The recipes planned for the other engine release installed beside the tiers' own go through that
release's own parser: vLLM 0.33.0 (the vllm-033 venv, parser only) for every Kimi vLLM argv, SGLang
0.5.22 (the sglang-0522 venv, parser only) for every TPU host's argv. The plan chooses the catalogue
of that version (FoundInPod.engine_version), so a recipe `false` is written the way it accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from roles import FoundInPod, build_plan
from roles.group import plan_group
from tests.engines.engine_venvs import run_checker

pytestmark = pytest.mark.engines
KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))
LEADER = "kimi-k3-1-gpu-vllm-0.kimi-k3-1-gpu-vllm.llm-d"
TPU_LEADER = "kimi-k3-1-tpu-sglang-0.kimi-k3-1-tpu-sglang.llm-d"
VLLM_033 = FoundInPod(engine_version="0.33.0")
SGLANG_0522 = FoundInPod(engine_version="0.5.22")


def _argvs(pool: str, found: FoundInPod, **settings: Any) -> dict[str, list[str]]:
    """Every process argv of every pod of the pool's group, by pod and process."""
    nodes = KIMI.pools[pool].nodes
    out = {}
    for i in range(nodes):
        tpu_worker_id = i if pool == "tpu" else None
        pod = Settings(
            pool=pool,
            group_size=nodes,
            worker_index=i,
            pod_ip=f"10.64.0.{9 + i}",
            tpu_worker_id=tpu_worker_id,
            **settings,
        )
        plan = build_plan(pod, KIMI, found=found)
        assert plan.needs.catalog_version == found.engine_version
        for process in plan.processes:
            out[f"{pool}/{i}/{process.name}"] = list(process.argv)
    return out


def test_every_kimi_vllm_argv_is_accepted_by_vllm_033(tmp_path: Path) -> None:
    cases: dict[str, list[str]] = {}
    for pool in ("prefill", "decode"):
        assert plan_group(Settings(pool=pool, leader_address=LEADER), KIMI).ok
        cases.update(_argvs(pool, VLLM_033, leader_address=LEADER))
    cases = {label: argv for label, argv in cases.items() if argv[0] == "vllm"}
    negative = [
        ["vllm", "serve", "/m", "--no-such-flag"],
        ["vllm", "serve", "/m", "--spec-method", "medusa"],  # 0.33 dropped medusa (0.32 has it)
    ]
    results = run_checker("vllm-033", "vllm_parse.py", [*cases.values(), *negative], tmp_path)
    verdicts = dict(zip(cases, results[: len(cases)], strict=True))
    assert len(cases) >= 7  # prefill x2 (+render on the leader), decode x4
    assert {label: v["error"] for label, v in verdicts.items() if not v["ok"]} == {}
    assert [r["ok"] for r in results[len(cases) :]] == [False, False]  # it really runs 0.33's checks
    for i in range(4):  # the decode pool's `enable-prefix-caching: false`, written as 0.33 reads it
        assert "--disable-prefix-caching" in cases[f"decode/{i}/engine"]
        assert verdicts[f"decode/{i}/engine"]["args"]["enable_prefix_caching"] is False
        assert verdicts[f"decode/{i}/engine"]["path"] == "dp-supervisor"
    assert verdicts["prefill/0/engine"]["path"] == "api-server"
    assert verdicts["prefill/1/engine"]["path"] == "headless"
    assert verdicts["prefill/0/engine"]["args"]["enable_prefix_caching"] is True


def test_every_tpu_host_argv_is_accepted_by_sglang_0522(tmp_path: Path) -> None:
    cases = _argvs("tpu", SGLANG_0522, leader_address=TPU_LEADER)
    negative = [
        ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--no-such-flag"],
        ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--enable-hicache"],  # 0.5.23's
    ]
    results = run_checker("sglang-0522", "sglang_parse.py", [*cases.values(), *negative], tmp_path)
    assert [r["error"] for r in results[: len(cases)]] == [""] * len(cases) and len(cases) == 4
    assert [r["ok"] for r in results[len(cases) :]] == [False, False]  # it really runs 0.5.22's parser
    for i, result in enumerate(results[: len(cases)]):
        args = result["args"]
        assert (args["tp_size"], args["ep_size"], args["nnodes"], args["node_rank"]) == (32, 8, 4, i)
