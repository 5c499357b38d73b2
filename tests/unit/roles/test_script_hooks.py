"""The wide-EP DeepSeek-V4 guide's launch script reads MOE_BACKEND and ALL2ALL_BACKEND to build vLLM's
command line (llm-d/llm-d guides/models/deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml
@6b047cfb: `--moe-backend "${MOE_BACKEND:-deep_gemm_mega_moe}"`, `--all2all-backend ${ALL2ALL_BACKEND}`
when set), so its alternative-backend components (flashinfer) patch only that env. The launcher writes
the command itself: such a pod is refused with the flag that does it, never run on the default."""

from __future__ import annotations

from typing import Any

import pytest

WIDE_EP = {"LLMD_RECIPE": "wide-ep-deepseek-v4", "LLMD_POOL": "decode", "POD_IP": "10.1.2.3"}


@pytest.mark.parametrize(
    ("name", "flag"), [("MOE_BACKEND", "--moe-backend"), ("ALL2ALL_BACKEND", "--all2all-backend")]
)
def test_a_guide_script_hook_is_refused_with_its_flag(run_cli: Any, name: str, flag: str) -> None:
    code, out, err = run_cli("plan", env={**WIDE_EP, name: "flashinfer_nvlink_one_sided"})
    assert code == 2 and out == ""
    assert err.startswith(f"llm-d-launcher: error: {name}: is 'flashinfer_nvlink_one_sided', a guide")
    assert f"LLMD_EXTRA_ARGS='{flag} flashinfer_nvlink_one_sided'" in err
    assert len(err.splitlines()) == 1


def test_the_flag_in_extra_args_is_the_route(plan_json: Any) -> None:
    extra = "--moe-backend flashinfer_cutlass --all2all-backend flashinfer_nvlink_one_sided"
    engine = plan_json(env={**WIDE_EP, "LLMD_EXTRA_ARGS": extra, "MOE_BACKEND": ""})["processes"][0]
    argv = engine["argv"]
    assert argv[argv.index("--moe-backend") + 1] == "flashinfer_cutlass"
    assert argv.count("--moe-backend") == 1
    assert argv[argv.index("--all2all-backend") + 1] == "flashinfer_nvlink_one_sided"
